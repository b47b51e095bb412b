package generator

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemgen/idemgen/generator/model"
)

// TestAttackSuggestionsAreLinear: "did you mean" compares a misspelt
// fingerprint pointer with every property name by full Levenshtein
// distance, O(len(a)·len(b)), though it only ever accepts a distance of
// at most 3. A spec of five 20,000-character property names and five
// 20,000-character pointers (200 KB) takes 36 s of CPU in idemgen
// validate; this one, 80 KB, takes several seconds. A distance bounded
// by 3 is a band of seven diagonals: linear in the names' length.
func TestAttackSuggestionsAreLinear(t *testing.T) {
	const length, names = 8000, 5
	var props, pointers []string
	for i := range names {
		props = append(props, fmt.Sprintf(`"p%d%s": {"type": "string"}`, i, strings.Repeat("a", length)))
		pointers = append(pointers, fmt.Sprintf(`"/q%d%s"`, i, strings.Repeat("b", length)))
	}
	spec := `{"openapi": "3.0.3", "info": {"title": "t", "version": "1"}, "paths": {"/pay": {"post": {"operationId": "pay",
 "x-idempotency": {"fingerprint": [` + strings.Join(pointers, ", ") + `]},
 "requestBody": {"content": {"application/json": {"schema": {"type": "object", "properties": {` + strings.Join(props, ", ") + `}}}}},
 "responses": {"200": {"description": "ok"}}}}}}`
	dir := t.TempDir()
	file := filepath.Join(dir, "openapi.json")
	if err := os.WriteFile(file, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, rep, err := Validate(context.Background(), file)
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if !model.HasErrors(rep.Diagnostics) {
		t.Fatalf("the missing pointers are not reported")
	}
	t.Logf("%d-byte spec: validated in %v", len(spec), took)
	if took > 1500*time.Millisecond {
		t.Errorf("validating a %d-byte spec took %v: its misspelt pointers are compared with its property names in time quadratic in their length", len(spec), took)
	}
}
