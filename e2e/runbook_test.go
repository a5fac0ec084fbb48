package e2e_test

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/tollgate-dev/tollgate/internal/storetest"
	"github.com/tollgate-dev/tollgate/internal/testio"
)

// alertRunbook returns the runbook annotation of an alert of deploy/prometheus/alerts.yaml,
// as the on-call engineer reads it.
func alertRunbook(t *testing.T, alert string) string {
	t.Helper()
	raw, err := os.ReadFile("../deploy/prometheus/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Groups []struct {
			Rules []struct {
				Alert       string
				Annotations map[string]string
			}
		}
	}
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	for _, g := range doc.Groups {
		for _, r := range g.Rules {
			if r.Alert == alert {
				if r.Annotations["runbook"] == "" {
					t.Fatalf("%s has no runbook", alert)
				}
				return r.Annotations["runbook"]
			}
		}
	}
	t.Fatalf("no alert %s in deploy/prometheus/alerts.yaml", alert)
	return ""
}

// loseASettlement makes an enforcer give up a measured settlement, as the alert
// TollgateSettlementsLost fires for it: a second enforcer without a spool admits a request
// of o's member (its durable start recorded), the control plane goes away, the usage is
// reported to that enforcer, and the enforcer stops before it could deliver it. The
// control plane comes back. The enforcer logs in JSON, saved to logFile. It returns the
// request id, which the enforcer's log line names as the runbook says.
func loseASettlement(t *testing.T, s *stack, o org, logFile string) string {
	t.Helper()
	enf := s.startEnforcer(t, map[string]string{"TOLLGATE_SHUTDOWN_TIMEOUT": "1s", "TOLLGATE_ENFORCER_SETTLE_WAIT": "100ms",
		"TOLLGATE_LOG_FORMAT": "json"})
	req, _ := http.NewRequest("POST", enf.http+"/check", nil)
	req.Header.Set("x-api-key", o.key)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	id := res.Header.Get("X-Service-Request-Id")
	if res.StatusCode != http.StatusOK || id == "" {
		t.Fatalf("/check answered %d, request id %q", res.StatusCode, id)
	}

	s.cp.stop()
	res, err = http.Post(enf.http+"/settle", "application/json",
		strings.NewReader(`{"requestId":"`+id+`","model":"`+model+`","inputTokens":1000000,"outputTokens":100000}`))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusAccepted {
		t.Fatalf("/settle with the control plane away answered %d, want 202 (queued)", res.StatusCode)
	}
	enf.stop()
	if !regexp.MustCompile(`SETTLEMENT NOT DELIVERED.*"request_id":"` + id + `"`).MatchString(enf.logs.String()) {
		t.Fatalf("the enforcer did not give the settlement up:\n%s", enf.logs.String())
	}
	if err := os.WriteFile(logFile, []byte(enf.logs.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	s.cpVars["TOLLGATE_HTTP_ADDR"], s.cpVars["TOLLGATE_GRPC_ADDR"] = s.cp.addrs["rest"], s.cp.addrs["grpc"]
	s.cpVars["TOLLGATE_ADMIN_ADDR"] = s.cp.addrs["admin"]
	s.startControlPlane(t)
	return id
}

// TestSettlementsLostByTheRunbook follows TollgateSettlementsLost's runbook as written,
// for two settlements an enforcer gave up: the request id from the log line, the command
// the runbook gives (read from deploy/prometheus/alerts.yaml), which takes what to charge
// from the real log line the enforcer wrote, once while its start is pending and once
// after abandonment recovery closed it. Each is charged exactly what the lost settlement
// would have been (its tokens at the organization's prices), once, and a repeat charges
// nothing. The runbook used to say "reconcile it", and the reviewed reconciliation
// refuses a settlement the control plane never received (not_quarantined): the spend
// stayed uncharged. Then it had the operator type a cost from the provider's records,
// as the log line named the request id alone.
func TestSettlementsLostByTheRunbook(t *testing.T) {
	t.Parallel()
	awayFromDayBoundary(t, 3*time.Minute)
	runbook := alertRunbook(t, "TollgateSettlementsLost")
	var command string
	for _, m := range regexp.MustCompile("`([^`]*)`").FindAllStringSubmatch(runbook, -1) {
		if strings.Contains(m[1], "/settle") {
			command = m[1]
		}
	}
	for _, p := range []string{"http://ENFORCER:9002", "REQUEST_ID", "ENFORCER_LOG"} {
		if !strings.Contains(command, p) {
			t.Fatalf("TollgateSettlementsLost's runbook gives no command naming %s to charge a lost settlement from its log line:\n%s", p, runbook)
		}
	}
	if _, err := exec.LookPath("jq"); err != nil && strings.Contains(command, "jq ") {
		t.Skip("no jq")
	}
	bin := buildCommands(t, "tollgate")
	s := startStack(t)
	o := s.setUpOrg(t)
	ownerKey := s.apiKey(t, o, o.owner)
	env := append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"),
		"TOLLGATE_API_URL="+s.rest, "TOLLGATE_API_KEY="+ownerKey, "TOLLGATE_INTERNAL_TOKEN="+internalToken)
	work := t.TempDir()
	logs := map[string]string{}
	lose := func(name string) string {
		logs[name] = work + "/" + name + ".log"
		return loseASettlement(t, s, o, logs[name])
	}
	// The first one closed by abandonment recovery, uncharged, before the second is lost.
	recovered := lose("recovered")
	out := runShell(t, work, env, "tollgate recover --reference lost --before "+time.Now().UTC().Add(time.Second).Format(time.RFC3339)+" --apply")
	if !strings.Contains(out, "recovered 1/1") {
		t.Fatalf("tollgate recover:\n%s", out)
	}
	pending := lose("pending")
	if used := s.status(t, o).Windows[0].UsedMicroUsd; used != 0 {
		t.Fatalf("used %d before the runbook, want 0", used)
	}

	// What the lost settlement (1,000,000 input and 100,000 output tokens) would have
	// charged: 210,000.
	cost := catalogCost(1_000_000, 0, 100_000)
	charge := func(id, log string) string {
		cmd := strings.NewReplacer("http://ENFORCER:9002", s.enfHTTP, "REQUEST_ID", id, "ENFORCER_LOG", log).Replace(command)
		return runShell(t, work, env, cmd)
	}
	if out := charge(pending, logs["pending"]); !strings.Contains(out, `"outcome":"settled"`) {
		t.Errorf("the runbook's command for the pending one: %s", out)
	}
	if used := s.status(t, o).Windows[0].UsedMicroUsd; used != cost {
		t.Fatalf("used %d after the runbook's command for the pending one, want %d", used, cost)
	}
	if out := charge(recovered, logs["recovered"]); !strings.Contains(out, `"outcome":"promoted"`) {
		t.Errorf("the runbook's command for the recovered one: %s", out)
	}
	if used := s.status(t, o).Windows[0].UsedMicroUsd; used != 2*cost {
		t.Fatalf("used %d after the runbook's command for the recovered one, want %d", used, 2*cost)
	}
	if out := charge(pending, logs["pending"]); !strings.Contains(out, `"outcome":"duplicate"`) {
		t.Errorf("the runbook's command run again: %s", out)
	}
	if used := s.status(t, o).Windows[0].UsedMicroUsd; used != 2*cost {
		t.Fatalf("used %d after the runbook's command run twice, want %d", used, 2*cost)
	}
}

// TestSettlementsNotChargedRunbookFindsTheConflict follows TollgateSettlementsNotCharged's
// runbook for a cost_conflict (a second, lower report of a request already charged): the
// log it names (the control plane's or the enforcers') must have a line naming the request
// id, the outcome and the settlement's message, and the log message the runbook quotes,
// when it quotes one. The runbook named the control plane's log, which has no such line:
// the enforcer that sent the settlement is the one that logs its refusal.
func TestSettlementsNotChargedRunbookFindsTheConflict(t *testing.T) {
	t.Parallel()
	awayFromDayBoundary(t, 3*time.Minute)
	runbook := alertRunbook(t, "TollgateSettlementsNotCharged")
	var sentence string
	for s := range strings.SplitSeq(runbook, ". ") {
		if strings.Contains(s, "cost_conflict") && strings.Contains(s, "log") {
			sentence = s
		}
	}
	s := startStack(t)
	var logs func() string
	switch {
	case strings.Contains(sentence, "control plane's log"):
		logs = s.cpLogs.String
	case strings.Contains(sentence, "enforcers' log"), strings.Contains(sentence, "enforcer's log"):
		logs = s.enfLogs.String
	default:
		t.Fatalf("TollgateSettlementsNotCharged's runbook names no log for cost_conflict:\n%s", runbook)
	}
	var quoted string
	if m := regexp.MustCompile(`"([^"]+)"`).FindStringSubmatch(sentence); m != nil {
		quoted = m[1]
	}

	o := s.setUpOrg(t)
	id := admitted(t, s.check(t, o.key), "within_limit")
	s.respond(t, id, "application/json", testio.Chunks(openAIJSON("chatcmpl-1", 2_000_000, 0, 0), 2)) // 300,000
	s.waitSettled(t, o, 1, 300_000)
	res, err := http.Post(s.enfHTTP+"/settle", "application/json", strings.NewReader(`{"requestId":"`+id+`","upstreamCostMicroUsd":1000}`))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusConflict {
		t.Fatalf("a second, lower report answered %d, want 409 (cost_conflict)", res.StatusCode)
	}
	waitFor(t, 10*time.Second, "the conflict counted by the control plane", func() bool {
		return strings.Contains(scrape(t, s.cp.addrs["admin"]), `tollgate_controlplane_accounting_settlements_total{result="cost_conflict"} 1`)
	})
	line := regexp.MustCompile(`(?m)^.*request_id=` + id + `.*cost_conflict.*message=.*$`).FindString(logs())
	if line == "" || !strings.Contains(line, quoted) {
		t.Fatalf("the log the runbook names (%q) has no line naming %s, cost_conflict and the message%s:\n%s",
			sentence, id, map[bool]string{true: "", false: " under " + strconv.Quote(quoted)}[quoted == ""], logs())
	}
}

// scrape reads a program's /metrics on its admin address.
func scrape(t *testing.T, admin string) string {
	t.Helper()
	res, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestRestoreIsNeverSeenHalfDone runs docs/admin.md's restore block with a pg_restore
// that takes its time, as a real database's does (minutes to hours): a stand-in on
// PATH runs the real one with the documented arguments, and pauses where a long restore
// is for a long time (after the schema, before the data; or, for a restore in one
// transaction, before it commits anything). There, the section promises what "the
// database is away" looks like: the REST API answers 503 and the enforcer refuses in
// closed mode (503). A restore that commits table by table showed the running programs
// an empty database instead: every session and API key unknown (401, which clients
// take for a revoked credential and do not retry), and, as tables filled, members,
// keys and policies of the backup apart from each other.
func TestRestoreIsNeverSeenHalfDone(t *testing.T) {
	t.Parallel()
	awayFromDayBoundary(t, 3*time.Minute)
	blocks := docBlocks(t, "../docs/admin.md", "## Restoring Postgres")
	if len(blocks) != 2 {
		t.Fatalf("%d sh blocks in docs/admin.md's Restoring Postgres, want 2 (the backup, the restore)", len(blocks))
	}
	real, err := exec.LookPath("pg_restore")
	if err != nil {
		t.Skip("no pg_restore")
	}
	bin := buildCommands(t, "controlplane", "tollgate")
	work := t.TempDir()
	shim := `#!/bin/bash
for a in "$@"; do
  if [ "$a" = --single-transaction ]; then
    touch "$WORK/paused"; while [ ! -e "$WORK/go" ]; do sleep 0.05; done
    exec "$REAL" "$@"
  fi
done
"$REAL" --section=pre-data "$@" || exit
touch "$WORK/paused"; while [ ! -e "$WORK/go" ]; do sleep 0.05; done
exec "$REAL" --section=data --section=post-data "$@"
`
	if err := os.WriteFile(bin+"/pg_restore", []byte(shim), 0o755); err != nil {
		t.Fatal(err)
	}
	s := startStack(t, map[string]string{"TOLLGATE_ENFORCER_IDENTITY_TTL": "1s"})
	o := s.setUpOrg(t)
	ownerKey := s.apiKey(t, o, o.owner)
	db := s.db.Pool.Config().ConnConfig.Database
	env := append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "DB="+db,
		"TOLLGATE_DATABASE_URL="+storetest.URLFor(db), "POSTGRES_ADMIN_URL="+storetest.URLFor("postgres"),
		"TOLLGATE_API_URL="+s.rest, "TOLLGATE_API_KEY="+ownerKey, "REAL="+real, "WORK="+work)
	admitted(t, s.check(t, o.key), "within_limit")
	runShell(t, work, env, blocks[0])

	restore := exec.Command("bash", "-e", "-o", "pipefail", "-c", blocks[1])
	restore.Dir, restore.Env = work, env
	var out bytes.Buffer
	restore.Stdout, restore.Stderr = &out, &out
	if err := restore.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- restore.Wait() }()
	waitFor(t, 30*time.Second, "the restore to reach its long part", func() bool {
		_, err := os.Stat(work + "/paused")
		return err == nil
	})
	// Past the enforcer's identity cache (1s), the check asks the control plane.
	var check int32
	waitFor(t, 10*time.Second, "a check answered from the database under restore", func() bool {
		check = int32(s.check(t, o.key).GetDeniedResponse().GetStatus().GetCode())
		return check != 0
	})
	rest, _ := s.call("GET", "/v1/me", o.owner.token, o.id, nil, nil)
	if err := os.WriteFile(work+"/go", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the documented restore failed: %v\n%s", err, out.String())
	}
	if check != 503 || rest != 503 {
		t.Fatalf("during the restore: the member's check answered %d and the owner's GET /v1/me %d, want 503 and 503 (the database away)", check, rest)
	}
	// And once it is done, the backup serves.
	waitFor(t, 15*time.Second, "the member admitted again", func() bool {
		out, _ := classify(s.check(t, o.key), nil)
		return out == outAdmitted
	})
}

// TestUnpricedModelsRunbookKeepsTheOtherPrices follows TollgateUnpricedModels' runbook
// as written: the command it gives (read from deploy/prometheus/alerts.yaml) prices a
// model nobody priced, run with an owner's API key in an organization that already has a
// price of its own for another model. The model is priced by the organization after it,
// and the other price is still the organization's. PUT /v1/gateway/model-prices replaces
// the whole table: the runbook said "Set the model's price with PUT
// /v1/gateway/model-prices", and a PUT of that model alone removed every other price the
// organization had set (a fine-tune's, charged at the fallback price from then on).
func TestUnpricedModelsRunbookKeepsTheOtherPrices(t *testing.T) {
	t.Parallel()
	runbook := alertRunbook(t, "TollgateUnpricedModels")
	var command string
	for _, m := range regexp.MustCompile("`([^`]*)`").FindAllStringSubmatch(runbook, -1) {
		if strings.Contains(m[1], "PUT") && strings.Contains(m[1], "/v1/gateway/model-prices") {
			command = m[1]
		}
	}
	for _, p := range []string{"MODEL", "INPUT", "OUTPUT", "CACHED"} {
		if !strings.Contains(command, p) {
			t.Fatalf("TollgateUnpricedModels' runbook gives no command naming %s to price a model:\n%s", p, runbook)
		}
	}
	s := startStack(t)
	o := s.setUpOrg(t) // the organization's own price of `model`
	env := append(os.Environ(), "TOLLGATE_API_URL="+s.rest, "TOLLGATE_API_KEY="+s.apiKey(t, o, o.owner))
	runShell(t, t.TempDir(), env, strings.NewReplacer("MODEL", "my-finetune", "INPUT", "300000", "OUTPUT", "1200000",
		"CACHED", "150000").Replace(command))
	var got struct {
		Prices []struct {
			Model                   string
			InputMicroUsdPerMillion int64
		}
	}
	s.must(t, 200, "GET", "/v1/gateway/model-prices?source=organization", o.owner.token, o.id, nil, &got)
	prices := map[string]int64{}
	for _, p := range got.Prices {
		prices[p.Model] = p.InputMicroUsdPerMillion
	}
	if prices["my-finetune"] != 300_000 || prices[model] != inputPrice || len(prices) != 2 {
		t.Fatalf("the organization's prices after the runbook: %v, want my-finetune at 300,000 and %s still at %d", prices, model, inputPrice)
	}
}
