package mirrorsync

import (
	"time"

	"github.com/tollgate-dev/tollgate/controlplane/limits"
	"github.com/tollgate-dev/tollgate/controlplane/store"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/mirror"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// BuildRecord renders one member's record from loaded inputs at now; nil when the
// member does not exist. Every timeframe is present: a timeframe no policy limits is
// unlimited there, and its spend is still reported.
func BuildRecord(in store.MirrorInputs, memberID string, version int64, generation string, now time.Time) *mirror.Record {
	m, ok := in.Members[memberID]
	if !ok {
		return nil
	}
	winners := in.Models[m.OrganizationID].Winners(limits.Subject{MemberID: m.ID, TeamIDs: m.TeamIDs})
	counters := in.Counters[m.ID]
	ent := &internalv1.Entitlement{OrganizationId: m.OrganizationID, MemberId: m.ID, MemberActive: m.Active, CaptureEnabled: true}
	ent.RefuseUnpricedModels, ent.PricedModelKeys = in.RefusingUnpriced[m.OrganizationID], in.PricedKeys[m.OrganizationID]
	if tr, ok := in.Tracking[m.ID]; ok {
		ent.TrackingVersion, ent.CaptureEnabled = tr.Version, tr.CaptureEnabled
	}
	rec := &mirror.Record{Version: version, Generation: generation, Entitlement: ent, AsOfUnixMs: now.UnixMilli()}
	for i, w := range window.Current(now) {
		lim := &internalv1.Limit{Timeframe: string(w.Timeframe), Unlimited: winners[i] == nil}
		if win := winners[i]; win != nil {
			lim.PolicyId, lim.PolicyName, lim.PolicyRevision = win.Policy.ID, win.Policy.Name, win.Policy.Revision
			lim.BaseMicroUsd, lim.HardLimit, lim.AllowRequestReset = win.Base, win.Policy.HardLimit, win.Policy.AllowRequestReset
			lim.ExtensionMicroUsd = counters[i].Extension
			g := win.Policy.Guard
			lim.ReserveInFlight, lim.ReservationMicroUsd, lim.MaxInFlight = g.ReserveInFlight, g.ReservationMicroUSD, g.MaxInFlight
		}
		ent.Limits = append(ent.Limits, lim)
		rec.Spend = append(rec.Spend, &internalv1.WindowSpend{Timeframe: string(w.Timeframe), WindowStartUnixMs: w.Start.UnixMilli(),
			UsedMicroUsd: counters[i].Used})
	}
	return rec
}
