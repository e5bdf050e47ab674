// g13: the Go SDK's OpenTelemetry instrumentation (sdks/go/opentelemetry) against the engine's
// OTLP collector and trace read. It runs last: the instrumentor sets the process's global
// tracer provider, after which every run this client triggers carries a traceparent.
package main

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	v0client "github.com/hatchet-dev/hatchet/pkg/client"
	hatchet "github.com/hatchet-dev/hatchet/sdks/go"
	hatchetotel "github.com/hatchet-dev/hatchet/sdks/go/opentelemetry"
)

const otelWorkerName = "go-otel-worker"

type tracedIn struct {
	Nonce string `json:"nonce"`
	Note  string `json:"note"`
}

// span is a row of the trace read (V1OtelSpan), the fields judged here.
type span struct {
	Name       string         `json:"spanName"`
	TraceID    string         `json:"traceId"`
	SpanID     string         `json:"spanId"`
	ParentID   string         `json:"parentSpanId"`
	Attributes map[string]any `json:"spanAttributes"`
}

// traceOf reads run `id`'s trace until it holds `want` spans (or the context ends), then once
// more after 1.5 s: a later export would show as too many.
func (s *suite) traceOf(ctx context.Context, id string, want int) []span {
	var rows []span
	read := func() (bool, error) {
		var page struct {
			Rows []span `json:"rows"`
		}
		path := fmt.Sprintf("/api/v1/stable/tenants/%s/traces?run_external_id=%s&limit=1000", s.hs.TenantID, id)
		if err := s.restGet(ctx, path, &page); err != nil {
			return false, nil // 404 until the spans are written
		}
		rows = page.Rows
		return len(rows) >= want, nil
	}
	wait, cancel := context.WithTimeout(ctx, 45*time.Second)
	_ = waitUntil(wait, fmt.Sprintf("%d spans in run %s's trace", want, id), 500*time.Millisecond, read)
	cancel()
	time.Sleep(1500 * time.Millisecond)
	_, _ = read()
	return rows
}

// judge lists what is wrong with a trace: its span count, names, trace ids, span ids, and the
// task's own span's parent.
func judge(what string, spans []span, want int, names []string) []string {
	var problems []string
	got := make([]string, 0, len(spans))
	distinct := map[string]bool{}
	traces, ids := map[string]bool{}, map[string]bool{}
	for _, sp := range spans {
		got = append(got, sp.Name)
		distinct[sp.Name] = true
		traces[sp.TraceID] = true
		ids[sp.SpanID] = true
	}
	sort.Strings(got)
	if len(spans) != want {
		problems = append(problems, fmt.Sprintf("%s: %d spans, want %d: %v", what, len(spans), want, got))
	}
	var have []string
	for n := range distinct {
		have = append(have, n)
	}
	sort.Strings(have)
	wanted := slices.Clone(names)
	sort.Strings(wanted)
	if !slices.Equal(have, wanted) {
		problems = append(problems, fmt.Sprintf("%s: span names %v, want %v", what, have, wanted))
	}
	if len(traces) != 1 {
		problems = append(problems, fmt.Sprintf("%s: %d trace ids", what, len(traces)))
	}
	if len(ids) != len(spans) {
		problems = append(problems, what+": a span id repeats")
	}
	var work, step *span
	for i := range spans {
		switch spans[i].Name {
		case "go.work":
			work = &spans[i]
		case hatchetotel.SpanStartStepRun:
			step = &spans[i]
		}
	}
	if work != nil && step != nil && work.ParentID != step.SpanID {
		problems = append(problems, what+": the task's span is not under the SDK's step span")
	}
	return problems
}

func (t *tasks) traceCheck(s *suite) {
	check("g13", "traces: the Go SDK's instrumentor and the engine's spans, one trace per run", 150*time.Second, func(ctx context.Context) error {
		inst, err := hatchetotel.NewInstrumentor()
		if err != nil {
			return fmt.Errorf("NewInstrumentor: %w", err)
		}
		defer func() { _ = inst.Shutdown(context.Background()) }()
		tracer := otel.Tracer("go-interop")
		traced := t.client.NewStandaloneTask("go-traced", func(hctx hatchet.Context, in tracedIn) (map[string]string, error) {
			_, sp := tracer.Start(hctx, "go.work")
			sp.SetAttributes(attribute.String("go.note", in.Note))
			sp.End()
			return map[string]string{"nonce": in.Nonce}, nil
		}, hatchet.WithRetries(0), hatchet.WithEvents("go:traced"))
		w, err := t.client.NewWorker(otelWorkerName, hatchet.WithWorkflows(traced), hatchet.WithSlots(5))
		if err != nil {
			return fmt.Errorf("NewWorker: %w", err)
		}
		w.Use(inst.Middleware())
		stop, err := w.Start()
		if err != nil {
			return fmt.Errorf("worker.Start: %w", err)
		}
		defer func() { _ = stop() }()
		if err := s.waitRegistered(ctx, otelWorkerName, []string{"go-traced:go-traced"}); err != nil {
			return err
		}
		n := nonce()
		ref, err := traced.RunNoWait(ctx, tracedIn{Nonce: n + "-run", Note: "direct"})
		if err != nil {
			return err
		}
		if _, err := ref.Result(); err != nil {
			return err
		}
		since := time.Now().Add(-10 * time.Minute).UTC().Format(time.RFC3339)
		if err := t.client.Events().Push(ctx, "go:traced", tracedIn{Nonce: n + "-ev", Note: "event"},
			v0client.WithEventMetadata(map[string]string{"g13": n})); err != nil {
			return err
		}
		var eventRun string
		err = waitUntil(ctx, "the event's run to complete", 500*time.Millisecond, func() (bool, error) {
			var list struct {
				Rows []struct {
					Metadata struct {
						ID string `json:"id"`
					} `json:"metadata"`
					Status string `json:"status"`
				} `json:"rows"`
			}
			path := fmt.Sprintf("/api/v1/stable/tenants/%s/workflow-runs?since=%s&only_tasks=false&additional_metadata=g13:%s", s.hs.TenantID, since, n)
			if err := s.restGet(ctx, path, &list); err != nil {
				return false, nil
			}
			for _, r := range list.Rows {
				if r.Status == "COMPLETED" {
					eventRun = r.Metadata.ID
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return err
		}
		if tp, ok := inst.TracerProvider().(*sdktrace.TracerProvider); ok {
			_ = tp.ForceFlush(ctx)
		}
		engine := []string{"hatchet.engine.workflow_run", "hatchet.engine.queued", "hatchet.engine.start_step_run"}
		base := append([]string{hatchetotel.SpanStartStepRun, "go.work"}, engine...)
		direct := s.traceOf(ctx, ref.RunId, 6)
		problems := judge("a run", direct, 6, append([]string{hatchetotel.SpanRunWorkflow}, base...))
		for _, sp := range direct {
			if sp.Name == "go.work" && sp.Attributes["go.note"] != "direct" {
				problems = append(problems, fmt.Sprintf("the task's own span reads %v", sp.Attributes))
			}
		}
		viaEvent := s.traceOf(ctx, eventRun, 7)
		problems = append(problems, judge("an event's run", viaEvent, 7, append([]string{"hatchet.push_event", "hatchet.engine.event"}, base...))...)
		logf("g13 traces: %d spans for a run, %d for an event's run", len(direct), len(viaEvent))
		if len(problems) > 0 {
			return fmt.Errorf("%s", strings.Join(problems, "; "))
		}
		return nil
	})
}
