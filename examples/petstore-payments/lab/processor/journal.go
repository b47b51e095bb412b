package processor

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
)

// journal is a file of JSON lines, one record a line, appended to and
// never rewritten. A process killed in the middle of a write leaves at
// most a partial last line, which open drops: the record it began was
// never answered, so it never happened.
type journal struct {
	f *os.File
}

// openJournal opens (creating) the journal at path and calls each with
// every whole line in it, oldest first.
func openJournal(path string, each func(line []byte) error) (*journal, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("processor: open %s: %w", path, err)
	}
	b, err := io.ReadAll(f)
	if err == nil {
		whole := bytes.LastIndexByte(b, '\n') + 1
		for _, line := range bytes.Split(b[:whole], []byte("\n")) {
			if len(line) > 0 && err == nil {
				err = each(line)
			}
		}
		if err == nil {
			err = f.Truncate(int64(whole))
		}
		if err == nil {
			_, err = f.Seek(int64(whole), io.SeekStart)
		}
	}
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("processor: read %s: %w", path, err)
	}
	return &journal{f: f}, nil
}

// append writes v as one line, in one write. The kernel keeps it when the
// process is killed afterwards; the lab kills processes, not machines,
// so the line is not synced to the disk.
func (j *journal) append(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if _, err := j.f.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("processor: append: %w", err)
	}
	return nil
}

func (j *journal) close() error { return j.f.Close() }
