package store

import (
	"context"
	"log/slog"
	"sync/atomic"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// newZapLogger returns a zap logger for etcd (server and client) that forwards
// warnings and errors to lg and drops everything below: etcd logs every
// startup step at info level, which is noise for everynode's users. Once
// quiet is set (the store is closing), everything is logged at debug level:
// etcd reports its own orderly shutdown as errors ("server closed").
func newZapLogger(lg *slog.Logger, quiet *atomic.Bool) *zap.Logger {
	return zap.New(&slogCore{lg: lg.With("component", "etcd"), quiet: quiet})
}

// expectedWarning reports whether msg is an etcd warning about a choice
// everynode makes on purpose (one port for gRPC and HTTP, simple auth tokens
// unused); those are logged at debug level.
func expectedWarning(msg string) bool {
	switch msg {
	case "Running http and grpc server on single port. This is not recommended for production.",
		"simple token is not cryptographically signed":
		return true
	}
	return false
}

// slogCore is a zapcore.Core writing to a *slog.Logger. Fields added with
// With are flattened into slog attributes on each write.
type slogCore struct {
	lg     *slog.Logger
	quiet  *atomic.Bool
	fields []zapcore.Field
}

var _ zapcore.Core = (*slogCore)(nil)

// Enabled reports whether a zap level is forwarded: warn and above.
func (c *slogCore) Enabled(l zapcore.Level) bool { return l >= zapcore.WarnLevel }

func (c *slogCore) With(fs []zapcore.Field) zapcore.Core {
	all := make([]zapcore.Field, 0, len(c.fields)+len(fs))
	all = append(append(all, c.fields...), fs...)
	return &slogCore{lg: c.lg, quiet: c.quiet, fields: all}
}

func (c *slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *slogCore) Write(e zapcore.Entry, fs []zapcore.Field) error {
	level := slog.LevelWarn
	switch {
	case c.quiet.Load() || expectedWarning(e.Message):
		level = slog.LevelDebug
	case e.Level >= zapcore.ErrorLevel:
		level = slog.LevelError
	}
	ctx := context.Background()
	if !c.lg.Enabled(ctx, level) {
		return nil
	}
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range c.fields {
		f.AddTo(enc)
	}
	for _, f := range fs {
		f.AddTo(enc)
	}
	attrs := make([]slog.Attr, 0, len(enc.Fields)+1)
	if e.LoggerName != "" {
		attrs = append(attrs, slog.String("logger", e.LoggerName))
	}
	for k, v := range enc.Fields {
		attrs = append(attrs, slog.Any(k, v))
	}
	c.lg.LogAttrs(ctx, level, e.Message, attrs...)
	return nil
}

func (c *slogCore) Sync() error { return nil }
