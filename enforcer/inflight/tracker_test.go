package inflight

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tollgate-dev/tollgate/enforcer/estimate"
	"github.com/tollgate-dev/tollgate/enforcer/metrics"
	"github.com/tollgate-dev/tollgate/enforcer/responseusage"
	"github.com/tollgate-dev/tollgate/enforcer/settleq"
	"github.com/tollgate-dev/tollgate/pkg/clock"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/pricecatalog"
	"google.golang.org/protobuf/proto"
)

type queue struct {
	mu    sync.Mutex
	items []*internalv1.SettleItem
	now   int // how many came through EnqueueNow
}

func (q *queue) Enqueue(item *internalv1.SettleItem, _ *settleq.Reservation, _ func(settleq.Result)) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.items = append(q.items, item)
	return nil
}

func (q *queue) EnqueueNow(item *internalv1.SettleItem, res *settleq.Reservation, done func(settleq.Result)) error {
	q.mu.Lock()
	q.now++
	q.mu.Unlock()
	return q.Enqueue(item, res, done)
}

// TestVoidNamesTheRequestOnly: a void is sent at once and carries the start's request,
// organization and member, marked voided, and nothing else (the control plane refuses a
// void with more).
func TestVoidNamesTheRequestOnly(t *testing.T) {
	q := &queue{}
	tr := New(q, clock.NewManual(time.Date(2026, 9, 16, 12, 0, 0, 0, time.UTC)), metrics.Discard(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	tr.Void(&internalv1.StartItem{RequestId: "req_spec", OrganizationId: "org", MemberId: "om", ReservationMicroUsd: 5,
		Snapshot: &internalv1.Snapshot{Version: 2, TrackingVersion: 1}}, nil, nil)
	want := &internalv1.SettleItem{RequestId: "req_spec", OrganizationId: "org", MemberId: "om", Voided: true}
	if len(q.items) != 1 || !proto.Equal(q.items[0], want) || q.now != 1 {
		t.Fatalf("queued %v (%d at once), want %v at once", q.items, q.now, want)
	}
}

func TestReapSettlesUnreportedRequestsAsIncomplete(t *testing.T) {
	q := &queue{}
	clk := clock.NewManual(time.Date(2026, 9, 16, 12, 0, 0, 0, time.UTC))
	tr := New(q, clk, metrics.Discard(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	snap := &internalv1.Snapshot{Version: 2}
	tr.Admitted(&Request{ID: "req_durable", OrganizationID: "org", MemberID: "om", Snapshot: snap, Durable: true, AdmittedAt: clk.Now()})
	tr.Admitted(&Request{ID: "req_failopen", OrganizationID: "org", MemberID: "om", Snapshot: snap, AdmittedAt: clk.Now()})
	tr.Admitted(&Request{ID: "req_streaming", OrganizationID: "org", MemberID: "om", Snapshot: snap, Durable: true, AdmittedAt: clk.Now()})
	if !tr.Follow("req_streaming") || tr.Follow("req_unknown") {
		t.Fatal("follow")
	}
	clk.Advance(10 * time.Minute)
	if n := tr.Reap(15 * time.Minute); n != 0 {
		t.Fatalf("reaped %d too early", n)
	}
	clk.Advance(6 * time.Minute)
	if n := tr.Reap(15 * time.Minute); n != 2 {
		t.Fatalf("reaped %d", n)
	}
	byID := map[string]*internalv1.SettleItem{}
	for _, it := range q.items {
		byID[it.GetRequestId()] = it
	}
	if it := byID["req_durable"]; it == nil || it.GetComplete() || it.GetSnapshot() != nil || it.GetMemberId() != "om" {
		t.Fatalf("durable %v", it)
	}
	if it := byID["req_failopen"]; it == nil || it.GetSnapshot() == nil {
		t.Fatalf("fail-open settlement must carry its snapshot: %v", it)
	}
	if byID["req_streaming"] != nil || tr.Len() != 1 {
		t.Fatal("a followed stream was reaped")
	}
	// The stream ends; then a late duplicate report is settled by id only.
	_ = tr.Finish("req_streaming", Usage{Model: "m", InputTokens: 1, OutputTokens: 2, Complete: true}, nil)
	_ = tr.Finish("req_streaming", Usage{}, nil)
	last := q.items[len(q.items)-1]
	if last.GetRequestId() != "req_streaming" || last.GetMemberId() != "" || tr.Len() != 0 {
		t.Fatalf("late report %v", last)
	}
}

func TestFinishChargesWhatWasSeen(t *testing.T) {
	cost := int64(99)
	for _, tc := range []struct {
		name      string
		recorded  bool // the request body was seen (RecordRequest)
		u         Usage
		in, out   int64
		model     string
		estimated bool
		complete  bool
	}{
		{name: "reported in full: nothing estimated", recorded: true,
			u:  Usage{Model: "resp", InputTokens: 10, OutputTokens: 20, Complete: true, UpstreamStatus: 200, Seen: &Seen{InputReported: true, OutputReported: true, TextBytes: 400}},
			in: 10, out: 20, model: "resp", complete: true},
		{name: "nothing reported: input from the request, output from the text", recorded: true,
			u:  Usage{Model: "resp", UpstreamStatus: 200, Seen: &Seen{TextBytes: 401}},
			in: 500, out: 101, model: "resp", estimated: true},
		{name: "nothing seen at all: the input estimate, the request's model", recorded: true,
			u:  Usage{UpstreamStatus: 200, Seen: &Seen{}},
			in: 500, model: "req-model", estimated: true},
		{name: "an early output count is a floor when the stream broke", recorded: true,
			u:  Usage{Model: "resp", InputTokens: 7, OutputTokens: 1, UpstreamStatus: 200, Seen: &Seen{InputReported: true, OutputReported: true, TextBytes: 40}},
			in: 7, out: 10, model: "resp", estimated: true},
		{name: "a larger reported output stands", recorded: true,
			u:  Usage{Model: "resp", InputTokens: 7, OutputTokens: 30, UpstreamStatus: 200, Seen: &Seen{InputReported: true, OutputReported: true, TextBytes: 40}},
			in: 7, out: 30, model: "resp"},
		{name: "error status without usage or text: nothing", recorded: true,
			u:     Usage{UpstreamStatus: 429, Seen: &Seen{}},
			model: "req-model"},
		{name: "a redirect without usage or text: nothing (its client sends the request again)", recorded: true,
			u:     Usage{UpstreamStatus: 307, Seen: &Seen{}},
			model: "req-model"},
		{name: "error status that streamed text is charged", recorded: true,
			u:  Usage{UpstreamStatus: 500, Seen: &Seen{TextBytes: 8}},
			in: 500, out: 2, model: "req-model", estimated: true},
		{name: "an upstream cost needs no estimate", recorded: true,
			u:     Usage{UpstreamCostMicroUSD: &cost, UpstreamStatus: 200, Seen: &Seen{TextBytes: 400}},
			model: "req-model"},
		{name: "an answer in audio: its duration is its output, 20 tokens a second", recorded: true,
			u:  Usage{UpstreamStatus: 200, Seen: &Seen{AudioOutputMillis: 2568}},
			in: 500, out: 52, model: "req-model", estimated: true},
		{name: "a streamed chat answer in audio cut before its usage: its audio and its transcript, both billed", recorded: true,
			u:  Usage{UpstreamStatus: 200, Seen: &Seen{AudioOutputMillis: 2568, TextBytes: 400}},
			in: 500, out: 52 + 100, model: "req-model", estimated: true},
		{name: "reported output is not replaced by the audio's", recorded: true,
			u:  Usage{Model: "m", InputTokens: 7, OutputTokens: 90, Complete: true, UpstreamStatus: 200, Seen: &Seen{InputReported: true, OutputReported: true, AudioOutputMillis: 1000}},
			in: 7, out: 90, model: "m", complete: true},
		{name: "no request body seen: output only",
			u:   Usage{UpstreamStatus: 200, Seen: &Seen{TextBytes: 4}},
			out: 1, estimated: true},
		{name: "final counts (POST /settle) are taken as they are", recorded: true,
			u:  Usage{Model: "m", InputTokens: 3, UpstreamStatus: 200},
			in: 3, model: "m"},
		{name: "counts estimated by the reporter", recorded: true,
			u:  Usage{Model: "m", InputTokens: 3, Estimated: true},
			in: 3, model: "m", estimated: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, q := admittedReqA()
			if tc.recorded && !tr.RecordRequest("req_a", estimate.Request{InputTokens: 500, Model: "req-model"}) {
				t.Fatal("not recorded")
			}
			_ = tr.Finish("req_a", tc.u, nil)
			it := q.items[0]
			if it.GetInputTokens() != tc.in || it.GetOutputTokens() != tc.out || it.GetModel() != tc.model ||
				it.GetUsageEstimated() != tc.estimated || it.GetComplete() != tc.complete {
				t.Fatalf("settled %v", it)
			}
		})
	}
}

// An image generation whose answer reports no usage (the stream broke after its partial
// images, the client left before the answer) is charged the images it asked for
// (RecordRequest's ImageOutputTokens), as the provider bills them; a reported usage
// stands, and a refusal without usage costs nothing.
func TestImageGenerationIsChargedItsImages(t *testing.T) {
	const images = 4_360 // one high-quality square image and two partial images
	for _, tc := range []struct {
		name      string
		u         Usage
		out       int64
		estimated bool
	}{
		{"the stream broke after its partial images", Usage{UpstreamStatus: 200, Seen: &Seen{}}, images, true},
		{"the client left before the answer", Usage{Seen: &Seen{}}, images, true},
		{"reported in full", Usage{Model: "gpt-image-1", InputTokens: 50, OutputTokens: 4_160, Complete: true, UpstreamStatus: 200,
			Seen: &Seen{InputReported: true, OutputReported: true}}, 4_160, false},
		{"refused without usage", Usage{UpstreamStatus: 400, Seen: &Seen{}}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, q := admittedReqA()
			tr.RecordRequest("req_a", estimate.Request{InputTokens: 12, Model: "gpt-image-1", ImageOutputTokens: images})
			_ = tr.Finish("req_a", tc.u, nil)
			it := q.items[0]
			if it.GetOutputTokens() != tc.out || it.GetUsageEstimated() != tc.estimated || it.GetModel() != "gpt-image-1" && tc.out > 0 {
				t.Fatalf("settled %v, want %d output tokens (estimated %v)", it, tc.out, tc.estimated)
			}
		})
	}
}

// An image generation tool's calls are settled as the request's image times the
// calls (RecordRequest's ImageCall); a reporter's own figures stand (POST /settle); an
// unknown request leaves the tokens to settlement's dearest image. The image model's
// input the answer reported is settled as it is, at the request's image model.
func TestImageGenerationCallsAreSettled(t *testing.T) {
	call := estimate.ImageCall{Model: "gpt-image-1-mini", Tokens: 272}
	for _, tc := range []struct {
		name     string
		recorded bool
		u        Usage
		model    string
		tokens   int64
	}{
		{"two calls of the request's image", true, Usage{Model: "gpt-5", ImageGenerationCalls: 2, Complete: true, UpstreamStatus: 200}, "gpt-image-1-mini", 544},
		{"the reporter's figures", true, Usage{ImageGenerationCalls: 2, ImageModel: "gpt-image-1", ImageOutputTokens: 9_000}, "gpt-image-1", 9_000},
		{"no call", true, Usage{Model: "gpt-5", Complete: true}, "", 0},
		{"the request not known here", false, Usage{ImageGenerationCalls: 3}, "", 0},
		{"saturated, never wrapped", true, Usage{ImageGenerationCalls: math.MaxInt64 / 100}, "gpt-image-1-mini", math.MaxInt64},
		{"calls and the image model's input", true, Usage{ImageGenerationCalls: 1, ImageToolInputTokens: 900, ImageToolCachedInputTokens: 100},
			"gpt-image-1-mini", 272},
		{"the image model's input alone, at the request's image model", true, Usage{ImageToolInputTokens: 900}, "gpt-image-1-mini", 0},
		{"the image model's input of a request not known here", false, Usage{ImageToolInputTokens: 900}, "", 0},
		{"the reporter's image model stands for its input", true, Usage{ImageModel: "gpt-image-1", ImageToolInputTokens: 900}, "gpt-image-1", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, q := admittedReqA()
			if tc.recorded {
				tr.RecordRequest("req_a", estimate.Request{InputTokens: 10, Model: "gpt-5", ImageGeneration: true, ImageCall: call})
			}
			_ = tr.Finish("req_a", tc.u, nil)
			it := q.items[0]
			if it.GetImageGenerationCalls() != tc.u.ImageGenerationCalls || it.GetImageModel() != tc.model || it.GetImageOutputTokens() != tc.tokens {
				t.Fatalf("settled %d calls of %q, %d tokens; want %q, %d", it.GetImageGenerationCalls(), it.GetImageModel(), it.GetImageOutputTokens(), tc.model, tc.tokens)
			}
			if it.GetImageToolInputTokens() != tc.u.ImageToolInputTokens || it.GetImageToolCachedInputTokens() != tc.u.ImageToolCachedInputTokens {
				t.Fatalf("settled the image model's input %d (%d cached), want %d (%d)", it.GetImageToolInputTokens(),
					it.GetImageToolCachedInputTokens(), tc.u.ImageToolInputTokens, tc.u.ImageToolCachedInputTokens)
			}
		})
	}
}

// An advisor's counts are settled apart, at the model of the request's advisor tool;
// a reporter's model stands; without either, they are added to the response's own
// counts (charged at its model's price, never dropped).
func TestAdvisorCountsAreSettled(t *testing.T) {
	advised := Usage{Model: "claude-haiku-4-5", InputTokens: 900, OutputTokens: 100, CachedTokens: 50, Complete: true, UpstreamStatus: 200,
		AdvisorInputTokens: 1000, AdvisorOutputTokens: 200, AdvisorCachedInputTokens: 300, AdvisorCacheCreationInputTokens: 40,
		AdvisorCacheCreation1hInputTokens: 30}
	reported := advised
	reported.AdvisorModel = "claude-opus-4-8"
	for _, tc := range []struct {
		name                       string
		recorded                   bool
		u                          Usage
		model                      string
		in, out, cached            int64
		advIn, advOut, write, hour int64
		ownWrite, ownHour          int64
	}{
		{"the request's advisor", true, advised, "claude-opus-4-7", 900, 100, 50, 1000, 200, 40, 30, 0, 0},
		{"the reporter's advisor", true, reported, "claude-opus-4-8", 900, 100, 50, 1000, 200, 40, 30, 0, 0},
		{"the request not known here: the response's own", false, advised, "", 1900, 300, 350, 0, 0, 0, 0, 40, 30},
		{"no advisor counts", true, Usage{Model: "m", InputTokens: 3, Complete: true}, "", 3, 0, 0, 0, 0, 0, 0, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, q := admittedReqA()
			if tc.recorded {
				tr.RecordRequest("req_a", estimate.Request{InputTokens: 10, Model: "claude-haiku-4-5", Advisor: true, AdvisorModel: "claude-opus-4-7"})
			}
			_ = tr.Finish("req_a", tc.u, nil)
			it := q.items[0]
			if it.GetAdvisorModel() != tc.model || it.GetInputTokens() != tc.in || it.GetOutputTokens() != tc.out || it.GetCachedInputTokens() != tc.cached ||
				it.GetAdvisorInputTokens() != tc.advIn || it.GetAdvisorOutputTokens() != tc.advOut || it.GetAdvisorCacheCreationInputTokens() != tc.write ||
				it.GetAdvisorCacheCreationOneHourInputTokens() != tc.hour || it.GetCacheCreationInputTokens() != tc.ownWrite ||
				it.GetCacheCreationOneHourInputTokens() != tc.ownHour {
				t.Fatalf("settled %v", it)
			}
		})
	}
}

// Whether a request went to a regional endpoint reaches its settlement from what the
// front door recorded of the request, or from the report itself (POST /settle).
// A stream cut before its last message_delta reports no advisor counts, though it showed
// its consultations (advisor_tool_result blocks): each is estimated, reading the input
// and the executor's output so far and writing the tool's max_tokens (else
// TypicalAdviceTokens), at the advisor's model. Reported counts stand; a request not
// known here is not estimated.
func TestAdvisorResultsAreEstimated(t *testing.T) {
	cut := Usage{Model: "claude-haiku-4-5", InputTokens: 900, OutputTokens: 1, UpstreamStatus: 200,
		Seen: &Seen{InputReported: true, OutputReported: true, TextBytes: 400, AdvisorResults: 2}}
	reported := cut
	reported.AdvisorInputTokens, reported.AdvisorOutputTokens = 700, 90
	for _, tc := range []struct {
		name      string
		recorded  bool
		maxTokens int64
		u         Usage
		in, out   int64
		model     string
	}{
		// 900 input tokens and 100 of output estimated from 400 bytes of text.
		{"two consultations, max_tokens 2,048", true, 2048, cut, 2 * 1000, 2 * 2048, "claude-opus-4-7"},
		{"no max_tokens: the typical advice", true, 0, cut, 2 * 1000, 2 * TypicalAdviceTokens, "claude-opus-4-7"},
		{"counts reported", true, 2048, reported, 700, 90, "claude-opus-4-7"},
		{"the request not known here", false, 2048, cut, 0, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, q := admittedReqA()
			if tc.recorded {
				tr.RecordRequest("req_a", estimate.Request{InputTokens: 10, Model: "claude-haiku-4-5", Advisor: true,
					AdvisorModel: "claude-opus-4-7", AdvisorMaxUses: 3, AdvisorMaxTokens: tc.maxTokens})
			}
			_ = tr.Finish("req_a", tc.u, nil)
			it := q.items[0]
			if it.GetAdvisorInputTokens() != tc.in || it.GetAdvisorOutputTokens() != tc.out || it.GetAdvisorModel() != tc.model ||
				it.GetComplete() || it.GetOutputTokens() != 100 {
				t.Fatalf("settled %s", it)
			}
			if tc.in > 0 && !it.GetUsageEstimated() {
				t.Fatal("the estimate is not marked so")
			}
		})
	}
}

// A prompt grounded with Google Maps reaches the settlement from the response read; an
// answer the provider did not bill (unbilled) carries none.
func TestMapsGroundedPromptIsSettled(t *testing.T) {
	grounded := responseusage.Usage{Model: "gemini-2.5-flash", InputTokens: 30, OutputTokens: 4, MapsGroundedPrompts: 1, Complete: true,
		InputReported: true, OutputReported: true}
	for _, tc := range []struct {
		name     string
		unbilled bool
		want     int64
	}{{"grounded", false, 1}, {"not billed", true, 0}} {
		t.Run(tc.name, func(t *testing.T) {
			tr, q := admittedReqA()
			_ = tr.Finish("req_a", FromResponse(grounded, true, 200, tc.unbilled), nil)
			if it := q.items[0]; it.GetMapsGroundedPrompts() != tc.want {
				t.Fatalf("settled %d grounded prompts, want %d", it.GetMapsGroundedPrompts(), tc.want)
			}
		})
	}
}

// The pages an OCR model read reach the settlement from the answer read.
func TestOCRPagesAreSettled(t *testing.T) {
	tr, q := admittedReqA()
	read := responseusage.Usage{Model: "mistral-ocr-2505-completion", OCRPages: 12, Complete: true, InputReported: true, OutputReported: true}
	_ = tr.Finish("req_a", FromResponse(read, true, 200, false), nil)
	if it := q.items[0]; it.GetOcrPages() != 12 || it.GetModel() != "mistral-ocr-2505-completion" || !it.GetComplete() {
		t.Fatalf("settled %v, want 12 pages of mistral-ocr-2505-completion", it)
	}
}

// sessions is a ContainerSessions that answers minutes and says what it was asked.
type sessions struct {
	minutes    int64
	err        error
	kind       string
	ids        []string
	start, end time.Time
}

func (s *sessions) Charge(_ context.Context, _ string, c pricecatalog.Container, ids []string, start, end time.Time) (int64, error) {
	s.kind, s.ids, s.start, s.end = c.Kind, ids, start, end
	return s.minutes, s.err
}

// TestContainerChargeResults: the results chargeContainers counts are the metric's
// labels, created at 0 (metrics.ContainerChargeResults).
func TestContainerChargeResults(t *testing.T) {
	if got := []string{ContainerCharged, ContainerUnknownRequest, ContainerLedgerUnavailable}; !slices.Equal(got, metrics.ContainerChargeResults) {
		t.Fatalf("results %q, the metric's labels %q", got, metrics.ContainerChargeResults)
	}
}

// TestContainersAreSettled: the containers an answer names are charged at the container
// price the request's tools asked for, from its admission to its end; at the provider's
// dearest where the request is not known, an estimate; not at all where its tools ask
// for no charged container; and a reporter's minutes are taken as they are.
func TestContainersAreSettled(t *testing.T) {
	read := func(provider string, ids ...string) Usage {
		return Usage{Model: "m", InputTokens: 5, OutputTokens: 6, Complete: true, UpstreamStatus: 200,
			Seen: &Seen{InputReported: true, OutputReported: true, ContainerIDs: ids, ContainerProvider: provider}}
	}
	for _, tc := range []struct {
		name      string
		record    *estimate.Request // nil: the request's body was not seen
		known     bool              // the tracker knows the request
		answer    sessions
		noLedger  bool
		u         Usage
		kind      string
		minutes   int64
		estimated bool
		result    string // the metric's result ("": none counted)
	}{
		{name: "the tools' memory", record: &estimate.Request{Model: "gpt-5", ContainerKind: "openai-4g"}, known: true,
			answer: sessions{minutes: 21}, u: read("openai", "cntr_a"), kind: "openai-4g", minutes: 21, result: ContainerCharged},
		{name: "the ledger's estimate", record: &estimate.Request{Model: "gpt-5", ContainerKind: "openai-1g"}, known: true,
			answer: sessions{minutes: 42, err: errors.New("redis: connection refused")}, u: read("openai", "cntr_a", "cntr_b"), kind: "openai-1g", minutes: 42, estimated: true, result: ContainerLedgerUnavailable},
		{name: "tools that ask for no charged container", record: &estimate.Request{Model: "claude-sonnet-4-5"}, known: true,
			answer: sessions{minutes: 5}, u: read("anthropic", "container_1")},
		{name: "a request whose body was not seen: the provider's dearest", known: true,
			answer: sessions{minutes: 21}, u: read("openai", "cntr_a"), kind: "openai-64g", minutes: 21, estimated: true, result: ContainerUnknownRequest},
		{name: "a request another enforcer admitted: the provider's dearest",
			answer: sessions{minutes: 5}, u: read("anthropic", "container_1"), kind: "anthropic", minutes: 5, estimated: true, result: ContainerUnknownRequest},
		{name: "without a ledger: as first seen", record: &estimate.Request{Model: "gpt-5", ContainerKind: "openai-1g"}, known: true,
			noLedger: true, u: read("openai", "cntr_a"), kind: "openai-1g", minutes: 20, estimated: true, result: ContainerLedgerUnavailable},
		{name: "a reporter's minutes", known: true, answer: sessions{minutes: 99},
			u: Usage{Model: "m", InputTokens: 5, Complete: true, ContainerKind: "anthropic", ContainerMinutes: 7}, kind: "anthropic", minutes: 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, q := admittedReqA()
			ledger := tc.answer
			if !tc.noLedger {
				tr.UseContainerSessions(&ledger)
			}
			id := "req_a"
			if !tc.known {
				id = "req_elsewhere"
			}
			if tc.record != nil && !tr.RecordRequest(id, *tc.record) {
				t.Fatal("not recorded")
			}
			_ = tr.Finish(id, tc.u, nil)
			it := q.items[0]
			if it.GetContainerKind() != tc.kind || it.GetContainerMinutes() != tc.minutes || it.GetUsageEstimated() != tc.estimated ||
				it.GetComplete() == tc.estimated {
				t.Fatalf("settled %v, want %d minutes of %q, estimated %v", it, tc.minutes, tc.kind, tc.estimated)
			}
			if tc.minutes > 0 && !tc.noLedger && tc.u.Seen != nil && !slices.Equal(ledger.ids, tc.u.Seen.ContainerIDs) {
				t.Fatalf("the ledger was asked for %q", ledger.ids)
			}
			for _, result := range metrics.ContainerChargeResults {
				want := 0.0
				if result == tc.result {
					want = 1
				}
				if got := testutil.ToFloat64(tr.m.ContainerCharges.WithLabelValues(result)); got != want {
					t.Fatalf("%s charges counted %v, want %v", result, got, want)
				}
			}
		})
	}
}

func TestRegionalEndpointIsSettled(t *testing.T) {
	for _, tc := range []struct {
		name               string
		recorded, reported bool
	}{{"neither", false, false}, {"recorded", true, false}, {"reported", false, true}, {"both", true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			tr, q := admittedReqA()
			tr.RecordRequest("req_a", estimate.Request{InputTokens: 10, Model: "claude-sonnet-4-5", Regional: tc.recorded})
			_ = tr.Finish("req_a", Usage{Model: "claude-sonnet-4-5", InputTokens: 10, Complete: true, UpstreamStatus: 200, Regional: tc.reported}, nil)
			if got := q.items[0].GetRegionalEndpoint(); got != (tc.recorded || tc.reported) {
				t.Fatalf("regional_endpoint %v", got)
			}
		})
	}
}

// A plain-text answer is output text when it succeeded (a transcript in a text format:
// its tokens are estimated from it) and nothing when it failed (a proxy's error page);
// a failed answer whose stream carried text keeps it, and duration usage travels.
func TestFromResponseReadsPlainTextOnlyOnSuccess(t *testing.T) {
	plain := responseusage.Usage{TextBytes: 26, PlainText: true}
	if got := FromResponse(plain, true, 200, false); got.Seen.TextBytes != 26 {
		t.Fatalf("a transcript's text: %+v", got.Seen)
	}
	for _, status := range []int32{400, 429, 502, 503} {
		if got := FromResponse(plain, true, status, false); got.Seen.TextBytes != 0 {
			t.Fatalf("an error page (%d) taken for output: %+v", status, got.Seen)
		}
	}
	streamed := responseusage.Usage{TextBytes: 8, Format: responseusage.FormatOpenAIChatSSE}
	if got := FromResponse(streamed, false, 500, false); got.Seen.TextBytes != 8 {
		t.Fatalf("a failed stream's text: %+v", got.Seen)
	}
	whisper := responseusage.Usage{AudioInputMillis: 62_500, Complete: true, InputReported: true, OutputReported: true}
	if got := FromResponse(whisper, true, 200, false); got.AudioInputMillis != 62_500 || !got.Complete {
		t.Fatalf("duration usage: %+v", got)
	}
}

func TestReapAndShutdownChargeTheInputEstimate(t *testing.T) {
	q := &queue{}
	clk := clock.NewManual(time.Date(2026, 9, 16, 12, 0, 0, 0, time.UTC))
	tr := New(q, clk, metrics.Discard(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	snap := &internalv1.Snapshot{Version: 2}
	tr.Admitted(&Request{ID: "req_reaped", OrganizationID: "org", MemberID: "om", Durable: true, AdmittedAt: clk.Now()})
	tr.Admitted(&Request{ID: "req_norecord", OrganizationID: "org", MemberID: "om", Snapshot: snap, WithoutRecord: true, AdmittedAt: clk.Now()})
	if tr.RecordRequest("req_unknown", estimate.Request{InputTokens: 1, Model: "m"}) || !tr.RecordRequest("req_reaped", estimate.Request{InputTokens: 42, Model: "gpt-x"}) || !tr.RecordRequest("req_norecord", estimate.Request{InputTokens: 7, Model: "gpt-y"}) {
		t.Fatal("RecordRequest")
	}
	clk.Advance(time.Hour)
	if tr.Reap(15*time.Minute) != 2 {
		t.Fatal("not reaped")
	}
	byID := map[string]*internalv1.SettleItem{}
	for _, it := range q.items {
		byID[it.GetRequestId()] = it
	}
	if it := byID["req_reaped"]; it.GetInputTokens() != 42 || it.GetModel() != "gpt-x" || !it.GetUsageEstimated() || it.GetComplete() || it.GetAdmittedWithoutRecord() {
		t.Fatalf("reaped %v", it)
	}
	if it := byID["req_norecord"]; it.GetInputTokens() != 7 || !it.GetAdmittedWithoutRecord() || it.GetSnapshot() != snap {
		t.Fatalf("reaped %v", it)
	}
	tr.Admitted(&Request{ID: "req_shutdown", OrganizationID: "org", MemberID: "om", Durable: true, AdmittedAt: clk.Now()})
	tr.RecordRequest("req_shutdown", estimate.Request{InputTokens: 9, Model: "gpt-z"})
	if n, left := tr.SettleAll(context.Background()); n != 1 || left != 0 {
		t.Fatal("SettleAll")
	}
	if it := q.items[len(q.items)-1]; it.GetInputTokens() != 9 || !it.GetUsageEstimated() {
		t.Fatalf("at shutdown %v", it)
	}
}

// Past its capacity the tracker settles the oldest request that no response stream
// follows as incomplete (with its snapshot when it has no durable start), counts it,
// and keeps the newest; a followed request is never evicted. A durable request keeps no
// snapshot (the control plane has it).
func TestCapacityEvictsTheOldestUnfollowed(t *testing.T) {
	q := &queue{}
	clk := clock.NewManual(time.Date(2026, 9, 16, 12, 0, 0, 0, time.UTC))
	m := metrics.Discard()
	tr := New(q, clk, m, slog.New(slog.NewTextHandler(io.Discard, nil)))
	tr.SetCapacity(1) // a followed request is never evicted: two are kept
	// Requests of one shard, in admission order.
	var ids []string
	for i := 0; len(ids) < 4; i++ {
		id := "req_" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		if len(ids) == 0 || tr.shard(id) == tr.shard(ids[0]) {
			ids = append(ids, id)
		}
	}
	snap := &internalv1.Snapshot{Version: 2}
	tr.Admitted(&Request{ID: ids[0], OrganizationID: "org", MemberID: "om", Snapshot: snap, Durable: true, AdmittedAt: clk.Now()})
	if r := tr.shard(ids[0]).m[ids[0]]; r.Snapshot != nil {
		t.Fatal("a durable request kept its snapshot")
	}
	if !tr.Follow(ids[0]) {
		t.Fatal("follow")
	}
	tr.Admitted(&Request{ID: ids[1], OrganizationID: "org", MemberID: "om", Snapshot: snap, AdmittedAt: clk.Now()})
	tr.Admitted(&Request{ID: ids[2], OrganizationID: "org", MemberID: "om", Durable: true, AdmittedAt: clk.Now()})
	tr.Admitted(&Request{ID: ids[3], OrganizationID: "org", MemberID: "om", Durable: true, AdmittedAt: clk.Now()})
	q.mu.Lock()
	got := q.items
	q.mu.Unlock()
	if len(got) != 2 || got[0].GetRequestId() != ids[1] || got[1].GetRequestId() != ids[2] {
		t.Fatalf("evicted %v, want %s then %s", got, ids[1], ids[2])
	}
	if got[0].GetSnapshot() == nil || got[0].GetComplete() || got[1].GetSnapshot() != nil {
		t.Fatalf("evictions not settled as incomplete: %v", got)
	}
	if tr.Len() != 2 || testutil.ToFloat64(m.InflightEvicted) != 2 {
		t.Fatalf("len %d, evicted metric %v", tr.Len(), testutil.ToFloat64(m.InflightEvicted))
	}
	// The followed one is still known; the newest too.
	if tr.RecordRequest(ids[0], estimate.Request{InputTokens: 1, Model: "m"}) != true || tr.RecordRequest(ids[3], estimate.Request{InputTokens: 1, Model: "m"}) != true || tr.RecordRequest(ids[2], estimate.Request{InputTokens: 1, Model: "m"}) {
		t.Fatal("wrong requests kept")
	}
}

type cancelling struct {
	queue
	cancel context.CancelFunc
}

func (c *cancelling) Enqueue(item *internalv1.SettleItem, res *settleq.Reservation, done func(settleq.Result)) error {
	c.cancel()
	return c.queue.Enqueue(item, res, done)
}

// At shutdown, settling stops at the deadline; requests without a durable start go
// first, since nothing else can close them.
func TestSettleAllStopsAtTheDeadlineFailOpenFirst(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	q := &cancelling{cancel: cancel}
	clk := clock.NewManual(time.Date(2026, 9, 16, 12, 0, 0, 0, time.UTC))
	tr := New(q, clk, metrics.Discard(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	for _, id := range []string{"req_a", "req_b", "req_c", "req_d"} {
		tr.Admitted(&Request{ID: id, OrganizationID: "org", MemberID: "om", Durable: true, AdmittedAt: clk.Now()})
	}
	tr.Admitted(&Request{ID: "req_open", OrganizationID: "org", MemberID: "om", Snapshot: &internalv1.Snapshot{Version: 2}, AdmittedAt: clk.Now()})
	settled, left := tr.SettleAll(ctx)
	if settled != 1 || left != 4 || len(q.items) != 1 || q.items[0].GetRequestId() != "req_open" {
		t.Fatalf("settled %d, left %d: %v", settled, left, q.items)
	}
}

// The audio and image parts of the counts travel to the settlement where the upstream
// reported them (FromResponse; the Realtime API's image parts, realtime.go), and an
// estimated count drops its parts: its split is unknown, and a model that prices audio
// or images apart is then charged the dearest price.
func TestAudioPartsTravelUnlessEstimated(t *testing.T) {
	got := responseusage.Usage{Model: "gpt-realtime", InputTokens: 100, OutputTokens: 60, AudioInputTokens: 80, AudioInputReported: true,
		InputReported: true, OutputReported: true, Complete: true}
	u := FromResponse(got, true, 200, false)
	if u.AudioInputTokens == nil || *u.AudioInputTokens != 80 || u.AudioOutputTokens != nil {
		t.Fatalf("FromResponse: audio %v / %v", u.AudioInputTokens, u.AudioOutputTokens)
	}
	for _, tc := range []struct {
		name            string
		seen            Seen
		complete        bool
		wantIn, wantOut bool // the part is still there
	}{
		{"reported in full", Seen{InputReported: true, OutputReported: true}, true, true, true},
		{"output estimated from the text of a cut stream", Seen{InputReported: true, OutputReported: true, TextBytes: 4000}, false, true, false},
		{"input estimated from the request", Seen{OutputReported: true}, false, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, q := admittedReqA()
			tr.RecordRequest("req_a", estimate.Request{InputTokens: 500, Model: "gpt-realtime"})
			in, out, img, cachedImg := int64(80), int64(50), int64(15), int64(5)
			seen := tc.seen
			_ = tr.Finish("req_a", Usage{Model: "gpt-realtime", InputTokens: 100, OutputTokens: 60, CachedTokens: 10, AudioInputTokens: &in, AudioOutputTokens: &out,
				ImageInputTokens: &img, CachedImageInputTokens: &cachedImg, Complete: tc.complete, UpstreamStatus: 200, Seen: &seen}, nil)
			it := q.items[0]
			if (it.AudioInputTokens != nil) != tc.wantIn || (it.AudioOutputTokens != nil) != tc.wantOut {
				t.Fatalf("settled audio %v / %v (estimated %v)", it.AudioInputTokens, it.AudioOutputTokens, it.GetUsageEstimated())
			}
			// The image parts are of the input: they go with it.
			if (it.ImageInputTokens != nil) != tc.wantIn || (it.CachedImageInputTokens != nil) != tc.wantIn ||
				tc.wantIn && (it.GetImageInputTokens() != 15 || it.GetCachedImageInputTokens() != 5) {
				t.Fatalf("settled image %v / %v (estimated %v)", it.ImageInputTokens, it.CachedImageInputTokens, it.GetUsageEstimated())
			}
			if tc.wantIn && it.GetAudioInputTokens() != 80 || tc.wantOut && it.GetAudioOutputTokens() != 50 {
				t.Fatalf("settled audio %d / %d", it.GetAudioInputTokens(), it.GetAudioOutputTokens())
			}
		})
	}
}

// admittedReqA is a tracker whose queue collects what it settles, that has admitted
// req_a (org, om, durable).
func admittedReqA() (*Tracker, *queue) {
	q := &queue{}
	clk := clock.NewManual(time.Date(2026, 9, 16, 12, 0, 0, 0, time.UTC))
	tr := New(q, clk, metrics.Discard(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	tr.Admitted(&Request{ID: "req_a", OrganizationID: "org", MemberID: "om", Durable: true, AdmittedAt: clk.Now()})
	return tr, q
}

// An Amazon Bedrock guardrail's units go with the settlement as the answer reported them;
// a request whose body asked for a guardrail and whose answer reported none (a stream cut
// before its metadata event) is charged an estimate: the text units of its prompt and of
// the answer seen, at every billed text policy. An error answer with nothing in it, none.
func TestGuardrailsAreSettled(t *testing.T) {
	reported := pricecatalog.GuardrailUnits{ContentText: 2, DeniedTopics: 2, AutomatedReasoning: 4, ContentImages: 1, ChecksPromptAttack: 3}
	for _, tc := range []struct {
		name      string
		record    *estimate.Request
		u         Usage
		want      *internalv1.GuardrailUnits
		estimated bool
	}{
		{name: "reported", record: &estimate.Request{Model: "m", InputTokens: 400, Guardrail: true},
			u:    Usage{Model: "m", InputTokens: 5, OutputTokens: 6, Complete: true, UpstreamStatus: 200, Guardrail: reported, Seen: &Seen{InputReported: true, OutputReported: true}},
			want: &internalv1.GuardrailUnits{ContentText: 2, DeniedTopics: 2, AutomatedReasoning: 4, ContentImages: 1, ChecksPromptAttack: 3}},
		{name: "cut before its trace: estimated", record: &estimate.Request{Model: "m", InputTokens: 400, Guardrail: true},
			u: Usage{Model: "m", UpstreamStatus: 200, Seen: &Seen{TextBytes: 1401}},
			// 400 tokens of prompt are 1,600 bytes; with the 1,401 of the answer, 3,001: 4 units.
			want:      &internalv1.GuardrailUnits{ContentText: 4, DeniedTopics: 4, SensitiveInformation: 4, ContextualGrounding: 4},
			estimated: true},
		{name: "a guardrail of free policies alone: its counts reported as 0, nothing estimated", record: &estimate.Request{Model: "m", InputTokens: 400, Guardrail: true},
			u: Usage{Model: "m", InputTokens: 400, OutputTokens: 6, Complete: true, UpstreamStatus: 200,
				Seen: &Seen{InputReported: true, OutputReported: true, TextBytes: 1401, GuardrailReported: true}}},
		{name: "no guardrail asked", record: &estimate.Request{Model: "m", InputTokens: 400},
			u: Usage{Model: "m", InputTokens: 400, OutputTokens: 6, Complete: true, UpstreamStatus: 200, Seen: &Seen{InputReported: true, OutputReported: true}}},
		{name: "an error answer with nothing in it", record: &estimate.Request{Model: "m", InputTokens: 400, Guardrail: true},
			u: Usage{Model: "m", UpstreamStatus: 400, Seen: &Seen{}}},
		{name: "a reporter's units", u: Usage{Model: "m", InputTokens: 5, Complete: true, Guardrail: reported},
			want: &internalv1.GuardrailUnits{ContentText: 2, DeniedTopics: 2, AutomatedReasoning: 4, ContentImages: 1, ChecksPromptAttack: 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, q := admittedReqA()
			if tc.record != nil && !tr.RecordRequest("req_a", *tc.record) {
				t.Fatal("not recorded")
			}
			_ = tr.Finish("req_a", tc.u, nil)
			it := q.items[0]
			if !proto.Equal(it.GetGuardrailUnits(), tc.want) || it.GetUsageEstimated() != tc.estimated {
				t.Fatalf("settled %v, want guardrail units %v, estimated %v", it, tc.want, tc.estimated)
			}
		})
	}
}

// A guarded request and a guardrail called on its own whose answers nobody reported
// (reaped, or settled at shutdown) are charged their guardrail's estimate: the guarded
// one the units of its prompt besides its input estimate, the check the units of its
// body and no token.
func TestUnreportedGuardrailsAreEstimated(t *testing.T) {
	q := &queue{}
	clk := clock.NewManual(time.Date(2026, 9, 16, 12, 0, 0, 0, time.UTC))
	tr := New(q, clk, metrics.Discard(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	for _, id := range []string{"req_guarded", "req_check", "req_check_shutdown"} {
		tr.Admitted(&Request{ID: id, OrganizationID: "org", MemberID: "om", Durable: true, AdmittedAt: clk.Now()})
	}
	if !tr.RecordRequest("req_guarded", estimate.Request{Model: "m", InputTokens: 400, Guardrail: true}) ||
		!tr.RecordGuardrailCheck("req_check", 2_500) || tr.RecordGuardrailCheck("req_unknown", 1) {
		t.Fatal("not recorded")
	}
	clk.Advance(time.Hour)
	tr.Admitted(&Request{ID: "req_check_shutdown", OrganizationID: "org", MemberID: "om", Durable: true, AdmittedAt: clk.Now()})
	tr.RecordGuardrailCheck("req_check_shutdown", 999)
	if n := tr.Reap(15 * time.Minute); n != 2 {
		t.Fatalf("reaped %d", n)
	}
	if n, _ := tr.SettleAll(context.Background()); n != 1 {
		t.Fatalf("settled %d at shutdown", n)
	}
	byID := map[string]*internalv1.SettleItem{}
	for _, it := range q.items {
		byID[it.GetRequestId()] = it
	}
	units := func(n int64) *internalv1.GuardrailUnits {
		return &internalv1.GuardrailUnits{ContentText: n, DeniedTopics: n, SensitiveInformation: n, ContextualGrounding: n}
	}
	for id, want := range map[string]struct {
		input int64
		units *internalv1.GuardrailUnits
	}{
		"req_guarded":        {input: 400, units: units(2)}, // 400 tokens are 1,600 bytes: 2 units
		"req_check":          {units: units(3)},             // 2,500 bytes
		"req_check_shutdown": {units: units(1)},
	} {
		it := byID[id]
		if it.GetInputTokens() != want.input || !proto.Equal(it.GetGuardrailUnits(), want.units) || !it.GetUsageEstimated() || it.GetComplete() {
			t.Errorf("%s settled %v, want %d input tokens and guardrail units %v, estimated", id, it, want.input, want.units)
		}
	}
}

// ApplyGuardrail's answer: its guardrail's units and no token; cut before its usage, an
// estimate from the request's body; an error answer, nothing.
func TestFromGuardrailCheck(t *testing.T) {
	units := pricecatalog.GuardrailUnits{ContentText: 2, DeniedTopics: 1}
	if u := FromGuardrailCheck(responseusage.Usage{Guardrail: units, GuardrailReported: true, TextBytes: 40}, true, 200, 2_500); u.Guardrail != units || !u.Complete ||
		u.Estimated || u.InputTokens != 0 || u.OutputTokens != 0 || u.Seen != nil || u.Model != "" {
		t.Fatalf("reported: %+v", u)
	}
	if u := FromGuardrailCheck(responseusage.Usage{}, false, 200, 2_500); u.Complete || !u.Estimated ||
		u.Guardrail != (pricecatalog.GuardrailUnits{ContentText: 3, DeniedTopics: 3, SensitiveInformation: 3, ContextualGrounding: 3}) {
		t.Fatalf("cut: %+v", u)
	}
	if u := FromGuardrailCheck(responseusage.Usage{}, true, 400, 2_500); !u.Guardrail.IsZero() || u.Estimated {
		t.Fatalf("an error: %+v", u)
	}
	// Reported as 0 (nothing the checks bill): nothing estimated.
	if u := FromGuardrailCheck(responseusage.Usage{GuardrailReported: true}, true, 200, 2_500); !u.Guardrail.IsZero() || u.Estimated || !u.Complete {
		t.Fatalf("reported 0: %+v", u)
	}
}

// An OpenRouter answer through a "bring your own key" provider key, within OpenRouter's
// free million such requests a month: its usage.cost is 0 (OpenRouter's fee) and the
// provider billed the key usage.cost_details.upstream_inference_cost, 0.027 USD. Read
// from the answer's bytes, the request settles at that upstream cost, not at 0 (an upstream
// cost wins over pricing the tokens).
func TestOpenRouterBYOKSettlesAtItsUpstreamCost(t *testing.T) {
	body := `{"id":"gen-1","object":"chat.completion","model":"anthropic/claude-sonnet-4.5","choices":[{"index":0,"message":{"role":"assistant","content":"Tolls are paid."}}],` +
		`"usage":{"prompt_tokens":4000,"completion_tokens":1000,"total_tokens":5000,"cost":0,"is_byok":true,"cost_details":{"upstream_inference_cost":0.027}}}`
	x := responseusage.New("application/json", map[string]string{}, responseusage.Limits{})
	if err := x.Write([]byte(body)); err != nil {
		t.Fatal(err)
	}
	tr, q := admittedReqA()
	if !tr.RecordRequest("req_a", estimate.Request{InputTokens: 4000, Model: "anthropic/claude-sonnet-4.5"}) {
		t.Fatal("not recorded")
	}
	_ = tr.Finish("req_a", FromResponse(x.Finish(true), true, 200, false), nil)
	if it := q.items[0]; it.UpstreamCostMicroUsd == nil || it.GetUpstreamCostMicroUsd() != 27_000 {
		t.Fatalf("settled at an upstream cost of %d micro-USD (set %v; tokens %d in, %d out), want the 27,000 the provider billed the key",
			it.GetUpstreamCostMicroUsd(), it.UpstreamCostMicroUsd != nil, it.GetInputTokens(), it.GetOutputTokens())
	}
}
