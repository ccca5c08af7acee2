package daemon

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gridmgr/gridmgr/config"
	"github.com/gridmgr/gridmgr/internal/text"
	"github.com/gridmgr/gridmgr/wire"
)

// A glide-in (docs/glidein.md) is a manager its launcher started as a job
// on a reserved host, with a [glidein] section in its properties file. Its
// life is run here, beside the Driver: from glidein.retire_at it is
// drained (it takes no new reservation, so no job starts there that the
// end of its own lease would kill); once it has had nothing to do — no
// application instance and no reservation — for glidein.idle, or at once
// when retired, it drains itself, looks again (a reservation may have
// come in meanwhile) and leaves by the shutdown command: the process
// exits 0, its launcher's job for it completes, and the launcher's queue
// removes the instance and releases the reservation, which restores the
// host. It never leaves while it holds an instance or a reservation.

// appsNested says whether the manager runs its applications in nested
// mode: inside the sandbox it runs in itself, without namespaces, cgroups
// or uids of their own (deploy's nested runner). A glide-in does: its
// launcher's host confines it, and so everything it runs.
func appsNested(cfg *config.Config) bool { return cfg.IsGlidein() }

// glideinCheck is how often a glide-in looks whether it has work: often
// enough for a short idle, at most every second.
func glideinCheck(idle time.Duration) time.Duration {
	return min(max(idle/4, 100*time.Millisecond), time.Second)
}

// startGlidein runs a glide-in's life until ctx ends (nothing for an
// ordinary manager).
func (m *Manager) startGlidein(ctx context.Context) {
	if !m.Cfg.IsGlidein() {
		return
	}
	g := m.Cfg.Glidein
	log := m.log.With("glidein", g.Name, "launcher", text.ShortPeer(g.Launcher), "owner", g.Owner)
	log.Info("glide-in up", "idle", g.Idle, "retire_at", g.RetireAt)
	go func() {
		t := time.NewTicker(glideinCheck(g.Idle))
		defer t.Stop()
		busySince, retired := time.Now(), false
		for {
			select {
			case <-ctx.Done():
				return
			case <-m.Driver.Done():
				return
			case <-t.C:
			}
			now := time.Now()
			if !retired && !g.RetireAt.IsZero() && !now.Before(g.RetireAt) {
				if err := m.glideinAdmin(ctx, "drain"); err != nil {
					log.Warn("glide-in: cannot retire (drain)", "err", err)
					continue
				}
				retired = true
				log.Info("glide-in retired: it takes no new reservation, and leaves when its work is done", "retire_at", g.RetireAt.Format(time.RFC3339))
			}
			busy, err := m.glideinBusy(ctx)
			if err != nil {
				log.Debug("glide-in: cannot tell whether it has work", "err", err)
				continue
			}
			if busy {
				busySince = now
				continue
			}
			why := ""
			switch {
			case retired:
				why = "retired (glidein.retire_at passed) and nothing left to do"
			case now.Sub(busySince) >= g.Idle:
				why = fmt.Sprintf("idle for %s (glidein.idle)", text.FormatDuration(g.Idle))
			default:
				continue
			}
			// Drain first, then look again: a reservation taken between
			// the look and the drain must keep it here.
			if !retired {
				if err := m.glideinAdmin(ctx, "drain"); err != nil {
					log.Warn("glide-in: cannot drain to leave", "err", err)
					continue
				}
			}
			if busy, err := m.glideinBusy(ctx); err != nil || busy {
				if !retired {
					_ = m.glideinAdmin(ctx, "undrain")
				}
				busySince = now
				continue
			}
			log.Info("glide-in leaves", "why", why)
			if err := m.glideinAdmin(ctx, "shutdown"); err != nil {
				log.Warn("glide-in: shutdown", "err", err)
			}
			return
		}
	}()
}

// glideinBusy says whether the manager holds an application instance or
// a live reservation.
func (m *Manager) glideinBusy(ctx context.Context) (bool, error) {
	if len(m.apps.ex.List()) > 0 {
		return true, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	rep, err := m.Driver.Request(ctx, &wire.Envelope{Body: &wire.Envelope_ReservationsRequest{ReservationsRequest: &wire.ReservationsRequest{Limit: 1}}})
	if err != nil {
		return false, err
	}
	if e := rep.GetError(); e != nil {
		return false, errors.New(e.Message)
	}
	return rep.GetReservationsReply().GetLive() > 0, nil
}

// glideinAdmin runs an admin command at this manager, as itself.
func (m *Manager) glideinAdmin(ctx context.Context, command string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	rep, err := m.Driver.Request(ctx, &wire.Envelope{Body: &wire.Envelope_AdminRequest{AdminRequest: &wire.AdminRequest{Command: command}}})
	if err != nil {
		return err
	}
	if e := rep.GetError(); e != nil {
		return errors.New(e.Message)
	}
	if a := rep.GetAdminReply(); a != nil && !a.Ok {
		return errors.New(a.Output)
	}
	return nil
}
