// Package chaos records what rink members do with their roles, from
// several processes on one machine, and checks the records for violations
// of rink's promise.
//
// A member appends one line per event to its own log file:
//
//	<monotonic ns> <member> <kind> <role> <token>
//
// Times are CLOCK_MONOTONIC, the same clock for every process on the
// machine, unaffected by wall-clock steps. Kinds: "acquire" (written and
// fsynced before the member acts on the role), "act" (the member checked
// its role context and acted: written before the action, stamped right
// before the check; see Log.WriteHeld), "release"
// (written after the role context ended), and "joined" (the member's
// rink.New returned; role "-", token 0).
//
// With replicas (rink.WithReplicas), a member also records the roles it
// holds as a secondary: "acquire-secondary" (written, and flushed, when
// Handler.Secondary starts, after the holding began), "act-secondary"
// (as "act", against the Handler.Secondary context; see
// Log.WriteHeldSecondary) and "release-secondary" (after that context
// ended). Secondaries have no fencing token: their records carry instead
// the holding's number in its process (1, 2, ...), which tells the
// holdings of one process apart.
package chaos

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Kind is what a record reports.
type Kind string

// The kinds of record.
const (
	Acquire Kind = "acquire"
	Act     Kind = "act"
	Release Kind = "release"
	Joined  Kind = "joined"
	// A secondary holding's records (see the package comment); their
	// token is the holding's number in its process.
	AcquireSecondary Kind = "acquire-secondary"
	ActSecondary     Kind = "act-secondary"
	ReleaseSecondary Kind = "release-secondary"
)

// Record is one line of a member's log.
type Record struct {
	Mono   int64 // CLOCK_MONOTONIC, nanoseconds
	Member string
	Kind   Kind
	Role   string
	Token  int64
	// Proc names the process that wrote the record (its log file), when
	// one member name was used by several processes one after another. It
	// is not part of the line; readers set it. Empty means Member.
	Proc string
}

func (r Record) proc() string {
	if r.Proc != "" {
		return r.Proc
	}
	return r.Member
}

// Now reads CLOCK_MONOTONIC.
func Now() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(fmt.Sprintf("chaos: CLOCK_MONOTONIC: %v", err)) // Linux always has it
	}
	return ts.Nano()
}

// Log appends records to a file. It is safe for concurrent use.
type Log struct {
	mu sync.Mutex
	f  *os.File
	w  *bufio.Writer
}

// Create opens (creating or appending to) the log at path.
func Create(path string) (*Log, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("chaos: opening log: %w", err)
	}
	return &Log{f: f, w: bufio.NewWriter(f)}, nil
}

// Write appends a record, stamped now. Acquisitions are flushed and
// fsynced before Write returns, so that a member killed right after never
// acted on a role without a durable record of holding it. Releases, joins
// and the records of secondary holdings are flushed (not fsynced), so that
// a kill -9 loses at most actions, and a liveness check never takes a role
// for held after its release. (A secondary's acquisition is not fsynced:
// the checker counts a holding only by its actions, written after it in
// the same file, so a record lost with it loses them too.)
func (l *Log) Write(member string, kind Kind, role string, token int64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := fmt.Fprintf(l.w, "%d %s %s %s %d\n", Now(), member, kind, role, token); err != nil {
		return err
	}
	if kind == Act || kind == ActSecondary {
		return nil
	}
	if err := l.w.Flush(); err != nil {
		return err
	}
	if kind != Acquire {
		return nil
	}
	return l.f.Sync()
}

// WriteHeld appends an "act" record for a role held under ctx, unless ctx
// has ended (then it writes nothing and returns false). The record's time
// is taken under the log's lock, right before ctx is checked: it is never
// later than the check it records. (Checked before the lock, as Write's
// callers do, the check can precede the record's time by as long as the
// lock is held by other records' fsyncs — tens of milliseconds while a
// member acquires many roles —, and the checker would take an action done
// before a handover for one done after it.)
func (l *Log) WriteHeld(ctx context.Context, member, role string, token int64) (bool, error) {
	return l.writeHeld(ctx, member, Act, role, token)
}

// WriteHeldSecondary is WriteHeld for a role held as a secondary under
// ctx (the Handler.Secondary context), its holding numbered n: it appends
// an "act-secondary" record, stamped right before ctx is checked, unless
// ctx has ended. A recorded action is so always inside the holding: after
// the acquisition record (written first, after the holding began), and no
// later than a check that found the holding alive.
func (l *Log) WriteHeldSecondary(ctx context.Context, member, role string, n int64) (bool, error) {
	return l.writeHeld(ctx, member, ActSecondary, role, n)
}

func (l *Log) writeHeld(ctx context.Context, member string, kind Kind, role string, token int64) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := Now()
	if ctx.Err() != nil {
		return false, nil
	}
	if _, err := fmt.Fprintf(l.w, "%d %s %s %s %d\n", now, member, kind, role, token); err != nil {
		return false, err
	}
	return true, nil
}

// Close flushes and closes the log.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.w.Flush(); err != nil {
		l.f.Close()
		return err
	}
	if err := l.f.Sync(); err != nil {
		l.f.Close()
		return err
	}
	return l.f.Close()
}

// Parse reads records. A last line without its newline is torn — the
// member was killed between two flushes of its buffered log, and the line
// may end mid-number — and is dropped.
func Parse(r io.Reader) ([]Record, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	lines := strings.Split(string(data), "\n")
	lines = lines[:len(lines)-1] // "" after the last newline, or a torn line
	out := make([]Record, 0, len(lines))
	for n, line := range lines {
		f := strings.Fields(line)
		if len(f) != 5 {
			return nil, fmt.Errorf("chaos: line %d: %q", n+1, line)
		}
		mono, err1 := strconv.ParseInt(f[0], 10, 64)
		token, err2 := strconv.ParseInt(f[4], 10, 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("chaos: line %d: %q", n+1, line)
		}
		out = append(out, Record{Mono: mono, Member: f[1], Kind: Kind(f[2]), Role: f[3], Token: token})
	}
	return out, nil
}
