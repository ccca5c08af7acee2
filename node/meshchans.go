package node

// meshChans is the Applier's table of each peer's current mesh channel.
// Most managers of a grid have one or two relations (a leaf: its
// superior), for which a map costs about 290 bytes and a hash per
// lookup; the table keeps up to meshSmall entries in a slice, searched
// in order, and moves them to a map when it grows past that (a superior
// with many inferiors).
type meshChans struct {
	small []meshChan
	big   map[string]uint64 // non-nil: every entry is here, small is nil
}

type meshChan struct {
	peer string
	ch   uint64
}

// meshSmall is how many entries the slice holds before the map takes
// over: a search of 16 strings of the same length costs about what a
// hash of one does.
const meshSmall = 16

func (m *meshChans) get(peer string) (uint64, bool) {
	if m.big != nil {
		ch, ok := m.big[peer]
		return ch, ok
	}
	for i := range m.small {
		if m.small[i].peer == peer {
			return m.small[i].ch, true
		}
	}
	return 0, false
}

func (m *meshChans) set(peer string, ch uint64) {
	if m.big != nil {
		m.big[peer] = ch
		return
	}
	for i := range m.small {
		if m.small[i].peer == peer {
			m.small[i].ch = ch
			return
		}
	}
	if len(m.small) < meshSmall {
		m.small = append(m.small, meshChan{peer, ch})
		return
	}
	m.big = make(map[string]uint64, 2*meshSmall)
	for _, e := range m.small {
		m.big[e.peer] = e.ch
	}
	m.big[peer] = ch
	m.small = nil
}

func (m *meshChans) del(peer string) {
	if m.big != nil {
		delete(m.big, peer)
		return
	}
	for i := range m.small {
		if m.small[i].peer == peer {
			last := len(m.small) - 1
			m.small[i] = m.small[last]
			m.small[last] = meshChan{}
			m.small = m.small[:last]
			if last == 0 {
				m.small = nil
			}
			return
		}
	}
}

// len is the number of peers with a channel.
func (m *meshChans) len() int {
	if m.big != nil {
		return len(m.big)
	}
	return len(m.small)
}
