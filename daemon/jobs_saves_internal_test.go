package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	jobstore "github.com/gridmgr/gridmgr/jobs/store"
	"github.com/gridmgr/gridmgr/node"
	"github.com/gridmgr/gridmgr/wire"
)

// The Driver asks for saves (Run) while the saver reports the last batch
// through the Driver's inbox. With the saver stuck in that report (a busy
// Driver), a burst of 40,000 saves, more than the 16,384 the bounded
// queue before this one held, must still be taken without waiting; once
// the report goes through, every save is written, in order, each
// barrier closed and each call answered once, and the queue holds no
// memory afterwards.
func TestSavesNeverBlockTheDriver(t *testing.T) {
	st, err := jobstore.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	var mu sync.Mutex
	var answered []uint64
	ctx, cancel := context.WithCancel(context.Background())
	r := &jobRuntime{st: st, log: slog.New(slog.DiscardHandler), ctx: ctx, cancel: cancel,
		saves: saveQueue{ready: make(chan struct{}, 1)}, refs: map[string][]string{}, resv: map[string][]string{},
		deliver: func(in node.Input) bool {
			<-release
			if in.Done.Err != nil {
				t.Errorf("save %d failed: %v", in.Done.ID, in.Done.Err)
			}
			mu.Lock()
			answered = append(answered, in.Done.ID)
			mu.Unlock()
			return true
		}}
	done := &barrier{done: make(chan struct{})}
	close(done.done)
	r.barrier = done
	r.wg.Add(1)
	go r.saver()

	const n = 40000
	var barriers []*barrier
	put := make(chan struct{})
	go func() {
		defer close(put)
		for i := range n {
			id := fmt.Sprintf("job-%05d", i)
			r.Run(node.Call{ID: uint64(i + 1), Kind: node.CallJob, Req: node.JobSave{
				Saves: []*wire.JobRecord{{Info: &wire.JobInfo{Id: id}}}, Next: uint64(i + 2)}})
			barriers = append(barriers, r.barrier)
		}
	}()
	select {
	case <-put:
	case <-time.After(time.Minute):
		t.Fatal("the Driver waited on the queue of saves while the saver waited on the Driver")
	}
	close(release)
	for i, b := range barriers {
		<-b.done
		if b.err != nil {
			t.Fatalf("save %d: %v", i, b.err)
		}
	}
	r.close()
	mu.Lock()
	if len(answered) != n {
		t.Fatalf("%d calls answered, want %d", len(answered), n)
	}
	for i, id := range answered {
		if id != uint64(i+1) {
			t.Fatalf("answer %d is for call %d: out of order", i, id)
		}
	}
	mu.Unlock()
	if r.saves.q != nil {
		t.Errorf("the emptied queue keeps %d slots", cap(r.saves.q))
	}
	st2, err := jobstore.Open(st.Dir())
	if err != nil {
		t.Fatal(err)
	}
	defer st2.Close()
	next, recs, err := st2.Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != n || next != n+1 {
		t.Fatalf("the store holds %d records, next %d; want %d, %d", len(recs), next, n, n+1)
	}
}
