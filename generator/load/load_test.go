package load

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/idemgen/idemgen/generator/model"
	"github.com/idemgen/idemgen/runtime/key"
)

func TestLoadPayments(t *testing.T) {
	spec, diags, err := Load(context.Background(), filepath.Join("testdata", "payments.yaml"), Options{DisplayName: "payments.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range diags {
		t.Log(d)
	}
	if spec == nil {
		t.Fatal("spec is nil")
	}
	if model.HasErrors(diags) {
		t.Fatal("unexpected errors")
	}
	if spec.Title != "Payments" || spec.Version != "1.0.0" || spec.Source != "payments.yaml" {
		t.Errorf("info = %q %q %q", spec.Title, spec.Version, spec.Source)
	}
	var got []string
	for _, op := range spec.Operations {
		got = append(got, op.Method+" "+op.Path+" "+op.ID+" "+op.GoName)
	}
	want := []string{
		"POST /accounts createAccount CreateAccount",
		"POST /pets/{pet_id}/adoptions post_pets_pet_id_adoptions PostPetsPetIdAdoptions",
		"POST /transfers createTransfer CreateTransfer",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("operations (-want +got):\n%s", diff)
	}
	tr := spec.Operations[2]
	wantPolicy := model.Policy{
		Scope: "operation", KeyIn: key.InHeader, KeyName: "Idempotency-Key", KeyMaxLength: 255,
		Required: true, TTL: 7 * 24 * time.Hour, Lease: 15 * time.Second, MaxSnapshotBytes: 1 << 20,
		ReplayHeaders: []string{"X-Request-Cost"}, OnLeaseExpiry: "takeover", Transactional: true,
		Fingerprint: []model.Field{
			{Pointer: "/amount", Type: model.TypeInteger, Pos: model.Pos{File: "payments.yaml", Line: 33, Col: 51}},
			{Pointer: "/currency", Type: model.TypeString, Pos: model.Pos{File: "payments.yaml", Line: 33, Col: 60}},
			{Pointer: "/from_account", Type: model.TypeString, Pos: model.Pos{File: "payments.yaml", Line: 33, Col: 36}},
			{Pointer: "/to_account", Type: model.TypeString, Pos: model.Pos{File: "payments.yaml", Line: 33, Col: 23}},
		},
	}
	if diff := cmp.Diff(wantPolicy, tr.Policy); diff != "" {
		t.Errorf("createTransfer policy (-want +got):\n%s", diff)
	}
	if tr.BodyMediaType != "application/json" || tr.Summary != "Move money" || tr.DerivedID {
		t.Errorf("createTransfer = %+v", tr)
	}
	ad := spec.Operations[1]
	if !ad.DerivedID || ad.BodyMediaType != "application/x-www-form-urlencoded" || !cmp.Equal(ad.PathParams, []string{"pet_id"}) {
		t.Errorf("adoptions = %+v", ad)
	}
	if ad.Policy.OnLeaseExpiry != "takeover" || ad.Policy.TTL != 24*time.Hour {
		t.Errorf("adoptions policy = %+v", ad.Policy)
	}
	acc := spec.Operations[0]
	if acc.Policy.OnLeaseExpiry != "fail-closed" || acc.Policy.Required || acc.Policy.Lease != time.Minute || len(acc.Policy.Fingerprint) != 0 {
		t.Errorf("accounts policy = %+v", acc.Policy)
	}
	if acc.Pos != (model.Pos{File: "payments.yaml", Line: 12, Col: 7}) {
		t.Errorf("accounts pos = %v", acc.Pos)
	}
}
