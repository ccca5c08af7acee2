package main

import (
	"time"

	"github.com/gridmgr/gridmgr/internal/text"
	"github.com/gridmgr/gridmgr/node/render"
	"github.com/gridmgr/gridmgr/wire"
)

// The CLI prints what node/render renders, as admin commands do.
var (
	fmtDur         = render.Dur
	stateName      = render.StateName
	shortPeer      = text.ShortPeer
	renderTree     = render.Tree
	incompleteText = render.IncompleteText
	oneLine        = render.OneLine
	fmtBytes       = render.Bytes
	amountsText    = render.Amounts
	stateText      = render.ReservationState
)

func untilText(ms int64) string { return render.Until(ms, time.Now()) }

func renderReservations(rs []*wire.Reservation) string { return render.ReservationList(rs, time.Now()) }
