package ledger_test

import (
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"

	at "github.com/tollgate-dev/tollgate/controlplane/internal/accountingtest"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
)

// olderSettleItem is SettleItem as a control plane older than discount_tier knows it:
// the schema without that field (and its enum).
func olderSettleItem(t *testing.T) protoreflect.MessageDescriptor {
	t.Helper()
	fd := protodesc.ToFileDescriptorProto(internalv1.File_v1_accounting_proto)
	var enums []*descriptorpb.EnumDescriptorProto
	for _, e := range fd.EnumType {
		if e.GetName() != "DiscountTier" {
			enums = append(enums, e)
		}
	}
	fd.EnumType = enums
	for _, m := range fd.MessageType {
		if m.GetName() != "SettleItem" {
			continue
		}
		var fields []*descriptorpb.FieldDescriptorProto
		for _, f := range m.Field {
			if f.GetName() != "discount_tier" {
				fields = append(fields, f)
			}
		}
		if len(fields) != len(m.Field)-1 {
			t.Fatal("SettleItem has no discount_tier")
		}
		m.Field = fields
	}
	fd.Name = proto.String("older/accounting.proto") // not registered: its own resolver
	file, err := protodesc.NewFile(fd, protoregistry.GlobalFiles)
	if err != nil {
		t.Fatal(err)
	}
	return file.Messages().ByName("SettleItem")
}

// TestFlexRollout: the flex tier travels in a field of its own (discount_tier), not as
// a new service_tier, so that no control plane charges it more than the standard price
// while an upgrade rolls out (enforcers before control planes). A control plane older
// than the field reads the item's tier from service_tier (an unknown value: the dearest
// tier it knows, six times the price) and priority_tier alone: a new enforcer's flex
// item leaves both at their zero values, so the older one reads it as standard, the
// price it charged flex before; this one charges half. A settlement of an older
// enforcer, without the field, is standard.
func TestFlexRollout(t *testing.T) {
	t.Parallel() // its own database and Redis prefix
	flex := &internalv1.SettleItem{Model: "gpt-6-sol", InputTokens: 100_000, OutputTokens: 10_000, Complete: true,
		DiscountTier: internalv1.DiscountTier_DISCOUNT_TIER_FLEX}
	wire, err := proto.Marshal(flex)
	if err != nil {
		t.Fatal(err)
	}

	// The older control plane's view of the bytes: what its tierOf read (service_tier,
	// else priority_tier) says standard, and discount_tier is an unknown field.
	older := dynamicpb.NewMessage(olderSettleItem(t))
	if err := proto.Unmarshal(wire, older); err != nil {
		t.Fatal(err)
	}
	fields := older.Descriptor().Fields()
	tier, priority := older.Get(fields.ByName("service_tier")).Enum(), older.Get(fields.ByName("priority_tier")).Bool()
	if tier != 0 || priority || len(older.GetUnknown()) == 0 {
		t.Fatalf("an older control plane reads service_tier %d, priority_tier %v (unknown bytes %d): want 0, false and the new field unknown",
			tier, priority, len(older.GetUnknown()))
	}
	if older.Get(fields.ByName("input_tokens")).Int() != 100_000 || older.Get(fields.ByName("model")).String() != "gpt-6-sol" {
		t.Fatalf("an older control plane reads other counts: %v", older)
	}

	e := at.New(t, at.Options{})
	org, ms := e.Org(t, 1)
	settle := func(it *internalv1.SettleItem) (int64, string, bool) {
		t.Helper()
		id := at.ReqID()
		start1(t, e, at.StartItem(id, org, ms[0], e.Clock.Now(), 0))
		it.RequestId = id
		r := settle1(t, e, it)
		if r.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED {
			t.Fatalf("settle: %v", r)
		}
		var tier string
		var priority bool
		if err := e.Store.Pool.QueryRow(ctx, `SELECT service_tier, priority_tier FROM usage_receipts WHERE request_id = $1`, id).Scan(&tier,
			&priority); err != nil {
			t.Fatal(err)
		}
		return r.CostMicroUsd, tier, priority
	}
	standard := int64(100_000*2 + 10_000*10)

	// This control plane: the same bytes at half the price, a receipt at "flex".
	var got internalv1.SettleItem
	if err := proto.Unmarshal(wire, &got); err != nil {
		t.Fatal(err)
	}
	if cost, tier, priority := settle(&got); cost != standard/2 || tier != "flex" || priority {
		t.Fatalf("flex: %d %q priority %v, want %d \"flex\" false", cost, tier, priority, standard/2)
	}
	// An older enforcer's settlement of the same answer (no discount_tier): standard.
	oldStyle := proto.Clone(flex).(*internalv1.SettleItem)
	oldStyle.DiscountTier = internalv1.DiscountTier_DISCOUNT_TIER_UNSPECIFIED
	if cost, tier, priority := settle(oldStyle); cost != standard || tier != "" || priority {
		t.Fatalf("old-style: %d %q priority %v, want %d \"\" false", cost, tier, priority, standard)
	}
	// The older control plane's re-encoding (an older enforcer replaying a newer one's
	// spool keeps the unknown field): still flex here.
	again, err := proto.Marshal(older)
	if err != nil {
		t.Fatal(err)
	}
	var replayed internalv1.SettleItem
	if err := proto.Unmarshal(again, &replayed); err != nil {
		t.Fatal(err)
	}
	if cost, tier, _ := settle(&replayed); cost != standard/2 || tier != "flex" {
		t.Fatalf("replayed: %d %q, want %d \"flex\"", cost, tier, standard/2)
	}
	at.Check(t, e.Store)
}
