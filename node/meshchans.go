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
	tag  uint64 // PeerTag(peer): compared first, so that a search reads no other entry's peer
	ch   uint64
}

// PeerTag packs the last 8 bytes of a peer id (its random end, for a
// libp2p id; a simulated manager's name whole, up to 8 bytes) into a
// number. Tables searched in order compare it before the id itself:
// comparing the ids would read each entry's string, a cache miss each
// at a million managers, where the tags sit in the entries.
func PeerTag(peer string) uint64 {
	var t uint64
	for i := max(0, len(peer)-8); i < len(peer); i++ {
		t = t<<8 | uint64(peer[i])
	}
	return t
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
	tag := PeerTag(peer)
	for i := range m.small {
		if e := &m.small[i]; e.tag == tag && e.peer == peer {
			return e.ch, true
		}
	}
	return 0, false
}

func (m *meshChans) set(peer string, ch uint64) {
	if m.big != nil {
		m.big[peer] = ch
		return
	}
	tag := PeerTag(peer)
	for i := range m.small {
		if e := &m.small[i]; e.tag == tag && e.peer == peer {
			e.ch = ch
			return
		}
	}
	if len(m.small) < meshSmall {
		m.small = append(m.small, meshChan{peer: peer, tag: tag, ch: ch})
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
	tag := PeerTag(peer)
	for i := range m.small {
		if e := &m.small[i]; e.tag == tag && e.peer == peer {
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
