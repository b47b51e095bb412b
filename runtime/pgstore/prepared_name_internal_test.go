package pgstore

import (
	"context"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// statementTexts are the texts of pgstore's statements (and the parts
// they are built of), by the name of their constant or variable. Every
// package-level name ending in SQL is here (TestStatementTextsListed).
func statementTexts() map[string][]string {
	return map[string][]string{
		"abandonFailClosedSQL": {abandonFailClosedSQL},
		"abandonTakeoverSQL":   {abandonTakeoverSQL},
		"cachedSinceSQL":       {cachedSinceSQL},
		"claimSQL":             {claimSQL},
		"claimFunctionSQL":     {claimFunctionSQL},
		"claimVersionSQL":      {claimVersionSQL},
		"closeCursorsSQL":      {closeCursorsSQL},
		"commitSQL":            {commitSQL},
		"compileClaimSQL":      {compileClaimSQL},
		"completeSQL":          {completeSQL},
		"completeTxSQL":        {completeTxSQL},
		"deallocateSQL":        {deallocateSQL},
		"decidingColumnsSQL":   {decidingColumnsSQL},
		"decidingRowSQL":       {decidingRowSQL},
		"discardPlansSQL":      {discardPlansSQL},
		"driverNameSQL":        {driverNameSQL},
		"failClosedTxSQL":      {failClosedTxSQL},
		"fireDeferredSQL":      {fireDeferredSQL},
		"forgetSQL":            {forgetSQL},
		"getSQL":               {getSQL},
		"guardKeysSQL":         {guardKeysSQL},
		"guardSQL":             {guardSQL},
		"guardSessionSQL":      {guardSessionSQL},
		"handlerPreparedSQL":   {handlerPreparedSQL},
		"heldRowSQL":           {heldRowSQL},

		"leanResetSQL":           leanResetSQL[:],
		"listPhasesSQL":          {listPhasesSQL},
		"loadPhaseSQL":           {loadPhaseSQL},
		"markCommittedSQL":       {markCommittedSQL},
		"migrateLockSQL":         {migrateLockSQL},
		"ownRowSQL":              {ownRowSQL},
		"peekSQL":                {peekSQL},
		"readOnlySQL":            {readOnlySQL},
		"reapSQL":                {reapSQL},
		"recacheSQL":             {recacheSQL},
		"recordPhaseSQL":         {recordPhaseSQL},
		"releaseOuterSQL":        {releaseOuterSQL},
		"releaseSQL":             {releaseSQL},
		"replacedSQL":            {replacedSQL},
		"reseedSQL":              {reseedSQL},
		"resetSQL":               resetSQL[:],
		"resolveSQL":             {resolveSQL},
		"rollbackSQL":            {rollbackSQL},
		"sameTxCheckSQL":         {sameTxCheckSQL},
		"sameTxSQL":              {sameTxSQL},
		"sessionCheckSQL":        {sessionCheckSQL},
		"sessionSettingsSQL":     {sessionSettingsSQL},
		"settleSQL":              {settleSQL},
		"settleSessionSQL":       {settleSessionSQL},
		"stageSQL":               {stageSQL, fmtStage("idempotency_outbox"), fmtStage(`"s"."idempotency_outbox"`)},
		"searchPathFunctionsSQL": {searchPathFunctionsSQL},
		"searchPathTypesSQL":     {searchPathTypesSQL},
		"statsSQL":               {statsSQL},
		"storeFunctionsSQL":      {storeFunctionsSQL},
		"storeTablesSQL":         {storeTablesSQL},
		"sweepPhasesSQL":         {sweepPhasesSQL},
		"sweepSQL":               {sweepSQL},
		"txClaimSQL":             {txClaimSQL},
		"txTimeoutsSQL":          {txTimeoutsSQL},
		"txWritesSQL":            {txWritesSQL},
		"watchedMadeHereSQL":     {watchedMadeHereSQL},
		"watchedSQL":             {watchedSQL},
	}
}

func fmtStage(table string) string { return strings.Replace(stageSQL, "%s", table, 1) }

// Every package-level constant or variable of pgstore's whose name ends
// in SQL is among statementTexts, so that the test below covers each
// text pgstore sends.
func TestStatementTextsListed(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	listed := statementTexts()
	var missing []string
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || (g.Tok != token.CONST && g.Tok != token.VAR) {
				continue
			}
			for _, spec := range g.Specs {
				for _, n := range spec.(*ast.ValueSpec).Names {
					if strings.HasSuffix(n.Name, "SQL") && listed[n.Name] == nil {
						missing = append(missing, f+": "+n.Name)
					}
				}
			}
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("statement texts not in statementTexts: %v", missing)
	}
}

// pgx runs, in place of any query whose text is the name of a statement
// prepared on the connection, that statement (docs/semantics.md §7.2). A
// handler's Prepare refuses, as its name, every text pgstore sends, and
// every part of one (ErrPreparedName), before anything is sent: but
// the arrays of names that are only ever parts of other statements, never
// sent alone.
func TestNoStatementTextIsAPreparableName(t *testing.T) {
	partsOnly := map[string]bool{"storeTablesSQL": true, "storeFunctionsSQL": true,
		"searchPathFunctionsSQL": true, "searchPathTypesSQL": true}
	for name, texts := range statementTexts() {
		if partsOnly[name] {
			continue
		}
		for i, text := range texts {
			h := newHandlerTx(refusedTx{}, nil)
			_, err := h.Prepare(context.Background(), text, "SELECT 1")
			if !errors.Is(err, ErrPreparedName) {
				t.Errorf("%s[%d]: Prepare under its text = %v; want ErrPreparedName", name, i, err)
			}
		}
	}
	// A short name, the kind pgx's own examples use, is prepared.
	h := newHandlerTx(refusedTx{}, nil)
	if _, err := h.Prepare(context.Background(), "insert_order", "SELECT 1"); !errors.Is(err, errRefusedTx) {
		t.Errorf("Prepare under a short name = %v; want it forwarded", err)
	}
}

var errRefusedTx = errors.New("sent")

// refusedTx is a pgx.Tx that fails Prepare, to show what reaches it.
type refusedTx struct{ pgx.Tx }

func (refusedTx) Prepare(context.Context, string, string) (*pgconn.StatementDescription, error) {
	return nil, errRefusedTx
}
