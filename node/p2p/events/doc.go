// Package events is the grid's monitoring event bus over go-libp2p-pubsub
// (gossipsub): managers publish the typed events their Core produces
// (wire.Event, node.Ready.Publish) and subscribe to the topics they relay;
// consumers (gridmgr watch, the web UI, the archiver) subscribe to what
// they need.
//
// Topics (docs/monitoring.md):
//
//	/gridmgr/ev/1/relation      relation up/suspect/down, failed superior, reparented, root
//	/gridmgr/ev/1/reservation   held, committed, renewed, released, expired, refused
//	/gridmgr/ev/1/app           installed, started, stopped, paused, resumed, exited, removed
//	/gridmgr/ev/1/admin         admin commands that asked for a change
//	/gridmgr/util/1/PEER        utilization samples of PEER's inferiors (and a root's own)
//	/gridmgr/evb/1/KIND         batches (wire.EventBatch) of the events of KIND's topic
//
// Publish takes everything queued at once and publishes the events of one
// kind in one signed batch on the kind's batch topic, while every peer the
// bus knows on the kind's event topic subscribes to the batch topic too;
// else (an older peer is there) one message per event, as before. A
// manager with such an older neighbour also says so to the grid, in a
// notice on the batch topic every Options.NoticeEvery, and every manager
// that hears one sends that kind's events singly for a while, so the older
// peer receives them from producers it is not next to.
// Subscribing to an event topic takes its batch topic too, and a batch
// arrives as its events, one by one, in order. A batch is refused whole
// if any event in it would be refused alone.
//
// Every manager subscribes to the four event topics, so that they flow
// along the tree, and to its own utilization topic; a manager publishes
// its sample on its superior's topic, so each manager receives its
// inferiors' samples only, whatever the size of the grid. The tree is the
// overlay: gossipsub's mesh degree is set wide so that every relation
// stays in the mesh.
//
// Messages are signed by their producer and verified strictly by every
// node that receives them; an event whose producer is not the signer is
// rejected (a forgery). The producer itself does not verify the signature
// it has just made (the repository's go-libp2p-pubsub,
// third_party/go-libp2p-pubsub, is patched for that: it was a quarter of a
// busy manager's CPU), and its own validator checks the event it encoded
// rather than decoding it again. A manager
// accepts a message only when it was forwarded by itself or by a related
// manager (Options.Accept), so a client cannot publish into the grid.
// Topics outside the list above cannot be subscribed, and one peer may
// not announce more than 64 subscriptions at once.
//
// What the caller must do: New the Bus once the libp2p host is up; hand
// it every event of Ready.Publish with Publish (it never blocks: a full
// queue drops, counted in Stats); Subscribe for local consumers and read
// their channel (a consumer that falls behind loses events, counted);
// Close at the end.
package events
