package sqlitestore

import (
	"database/sql"
	"database/sql/driver"
	"fmt"
)

// driverArgs returns a handler's arguments with each one that is not a
// driver.Value already converted to one, as database/sql converts it for
// this driver (driver.DefaultParameterConverter: the driver has no
// driver.NamedValueChecker or driver.ColumnConverter of its own), and an
// error in database/sql's words for one that cannot be. database/sql
// converts an argument inside the call, holding the transaction's
// connection and its close lock, and the conversion runs an argument's
// driver.Valuer: a Value that hangs there would keep database/sql's
// rollback at the lease's end waiting, and the transaction, with SQLite's
// only write lock, open for ever. Converted before the call, a Value that
// hangs holds the handler alone, and the lease ends the transaction as it
// ends one whose handler hangs anywhere else. database/sql then finds
// every argument a driver.Value and passes it on as it is. args are
// returned as they are when every one is a driver.Value.
func driverArgs(args []any) ([]any, error) {
	i := 0
	for i < len(args) && driver.IsValue(args[i]) {
		i++
	}
	if i == len(args) {
		return args, nil
	}
	out := make([]any, len(args))
	copy(out, args[:i])
	for ; i < len(args); i++ {
		arg := args[i]
		named, isNamed := arg.(sql.NamedArg)
		if isNamed {
			arg = named.Value
		}
		if driver.IsValue(arg) {
			out[i] = args[i]
			continue
		}
		v, err := driver.DefaultParameterConverter.ConvertValue(arg)
		if err != nil {
			return nil, fmt.Errorf("sql: converting argument %s type: %w", describeArg(i, named.Name), err)
		}
		if isNamed {
			named.Value = v
			out[i] = named
		} else {
			out[i] = v
		}
	}
	return out, nil
}

// describeArg names the argument at index i as database/sql's errors do.
func describeArg(i int, name string) string {
	if name == "" {
		return fmt.Sprintf("$%d", i+1)
	}
	return fmt.Sprintf("with name %q", name)
}
