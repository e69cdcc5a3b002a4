package bench

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// logLine is one captured log entry of a member.
type logLine struct {
	Time    time.Time
	Level   zapcore.Level
	Member  string
	Message string
	Fields  map[string]any
}

func (l logLine) String() string {
	keys := make([]string, 0, len(l.Fields))
	for k := range l.Fields {
		if k != "rink" && k != "member" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var b strings.Builder
	fmt.Fprintf(&b, "%-5s %s: %s", l.Level.CapitalString(), l.Member, l.Message)
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%v", k, l.Fields[k])
	}
	return b.String()
}

// logCapture keeps the log lines (info and above) of every member of a run
// in memory, for the diagnosis of a run that went wrong.
type logCapture struct {
	mu    sync.Mutex
	lines []logLine
}

// logger returns a zap logger whose entries the capture keeps.
func (c *logCapture) logger() *zap.Logger { return zap.New(&captureCore{c: c}) }

func (c *logCapture) snapshot() []logLine {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.lines)
}

type captureCore struct {
	c      *logCapture
	fields []zapcore.Field
}

func (cc *captureCore) Enabled(l zapcore.Level) bool { return l >= zapcore.InfoLevel }

func (cc *captureCore) With(fs []zapcore.Field) zapcore.Core {
	return &captureCore{c: cc.c, fields: append(slices.Clone(cc.fields), fs...)}
}

func (cc *captureCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if cc.Enabled(e.Level) {
		return ce.AddCore(e, cc)
	}
	return ce
}

func (cc *captureCore) Write(e zapcore.Entry, fs []zapcore.Field) error {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range cc.fields {
		f.AddTo(enc)
	}
	for _, f := range fs {
		f.AddTo(enc)
	}
	member, _ := enc.Fields["member"].(string)
	cc.c.mu.Lock()
	cc.c.lines = append(cc.c.lines, logLine{Time: e.Time, Level: e.Level, Member: member, Message: e.Message, Fields: enc.Fields})
	cc.c.mu.Unlock()
	return nil
}

func (cc *captureCore) Sync() error { return nil }
