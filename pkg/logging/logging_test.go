package logging_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/pkg/logging"
)

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name, format, level string
		want                []string
	}{
		{"defaults", "text", "info", nil},
		{"json debug", "json", "debug", nil},
		{"bad format", "xml", "warn", []string{"TOLLGATE_LOG_FORMAT"}},
		{"bad level", "text", "loud", []string{"TOLLGATE_LOG_LEVEL"}},
		{"both", "", "", []string{"TOLLGATE_LOG_FORMAT", "TOLLGATE_LOG_LEVEL"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := logging.Validate(tc.format, tc.level)
			if len(got) != len(tc.want) {
				t.Fatalf("problems %q, want %d", got, len(tc.want))
			}
			for i, w := range tc.want {
				if !strings.HasPrefix(got[i], w+":") {
					t.Errorf("problem %q does not name %s", got[i], w)
				}
			}
		})
	}
}

func TestNewFormatAndLevel(t *testing.T) {
	var buf bytes.Buffer
	log := logging.New("json", "warn", &buf)
	log.Info("hidden")
	log.Warn("shown", "k", 1)
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil || line["msg"] != "shown" || strings.Contains(buf.String(), "hidden") {
		t.Fatalf("json warn logger wrote %q (%v)", buf.String(), err)
	}
	buf.Reset()
	logging.New("text", "debug", &buf).Debug("dbg")
	if !strings.Contains(buf.String(), "level=DEBUG msg=dbg") {
		t.Fatalf("text debug logger wrote %q", buf.String())
	}
}

// TestRedisLoggerKeepsJSON: a go-redis line becomes one JSON record, not a plain line.
func TestRedisLoggerKeepsJSON(t *testing.T) {
	var buf bytes.Buffer
	l := logging.RedisLogger{Log: logging.New("json", "info", &buf)}
	l.Printf(context.Background(), "redis: discarding bad PubSub connection: %s\n", "EOF")
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("not JSON: %q (%v)", buf.String(), err)
	}
	if line["msg"] != "discarding bad PubSub connection: EOF" || line["level"] != "WARN" || line["component"] != "redis" {
		t.Fatalf("record %v", line)
	}
	buf.Reset()
	logging.RedisLogger{Log: logging.New("json", "error", &buf)}.Printf(context.Background(), "redis: x")
	if buf.Len() != 0 {
		t.Fatalf("below the level: %q", buf.String())
	}
}
