package cli

import (
	"fmt"
	"path/filepath"

	"github.com/idemgen/idemgen/generator/breaking"
)

// storedName is the operation name the keys of operation op are stored
// under. A renamed operation keeps its former ID in stored keys
// (previousOperationId), so --operation with the new ID would select
// nothing; the lock file says which name the keys carry. The lock file is
// --lock, or else the one beside the generated code of the nearest
// idemgen.yaml; with neither, op is taken as stored.
func (kf *keysFlags) storedName(op string) (string, error) {
	if op == "" {
		return "", nil
	}
	file, required := kf.lock, true
	if file == "" {
		required = false
		cfg, err := findConfig()
		if err != nil || cfg == "" {
			return op, nil
		}
		s, err := readConfig(cfg)
		if err != nil || s.Out == "" {
			return op, nil
		}
		file = filepath.Join(s.Out, breaking.FileName)
	}
	lock, err := breaking.ReadLock(file, required)
	if err != nil {
		return "", failure{fmt.Sprintf("--lock: %v", err)}
	}
	if lock == nil {
		return op, nil
	}
	for _, e := range lock.Operations {
		if e.OperationID == op && e.StoredAs != "" {
			return e.StoredAs, nil
		}
	}
	return op, nil
}
