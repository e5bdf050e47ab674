// The Go suite's tasks, declared with the official Go SDK, and its checks. The worker runs in
// this process, so a task tells a check what happened inside it through `seen` (keyed by the
// nonce each check puts in its inputs), never through the run's own output alone.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/hatchet-dev/hatchet/pkg/client/rest"
	"github.com/hatchet-dev/hatchet/pkg/client/types"
	hatchet "github.com/hatchet-dev/hatchet/sdks/go"
)

type msg struct {
	Nonce string `json:"nonce"`
	N     int    `json:"n,omitempty"`
	Group string `json:"group,omitempty"`
	Key   string `json:"rl_key,omitempty"`
}

type echoOut struct {
	Echo   msg    `json:"echo"`
	Worker string `json:"worker"`
}

// seen is what the tasks observed, per nonce.
type seen struct {
	mu       sync.Mutex
	runs     map[string]int               // executions
	errors   map[string]map[string]string // on-failure: StepRunErrors
	started  map[string]chan struct{}     // go-slow: the task is running
	canceled map[string]chan struct{}     // go-slow: its context is done
	active   map[string]int               // go-conc: running now, per group
	maxOf    map[string]int               // go-conc: most running at once, per group
	allNow   int                          // go-conc: running now, all groups
	allMax   int                          // go-conc: most running at once, all groups
}

func (s *seen) ran(nonce string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.runs[nonce]++
	return s.runs[nonce]
}

func (s *seen) count(nonce string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runs[nonce]
}

func (s *seen) chans(nonce string) (started, canceled chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started[nonce] == nil {
		s.started[nonce] = make(chan struct{})
		s.canceled[nonce] = make(chan struct{})
	}
	return s.started[nonce], s.canceled[nonce]
}

type tasks struct {
	client  *hatchet.Client
	seen    *seen
	echo    *hatchet.StandaloneTask
	dag     *hatchet.Workflow
	flaky   *hatchet.StandaloneTask
	parent  *hatchet.StandaloneTask
	durable *hatchet.StandaloneTask
	fails   *hatchet.Workflow
	slow    *hatchet.StandaloneTask
	conc    *hatchet.StandaloneTask
	limited *hatchet.StandaloneTask
}

func (t *tasks) all() []hatchet.WorkflowBase {
	return []hatchet.WorkflowBase{t.echo, t.dag, t.flaky, t.parent, t.durable, t.fails, t.slow, t.conc, t.limited}
}

func declare(client *hatchet.Client) *tasks {
	s := &seen{
		runs: map[string]int{}, errors: map[string]map[string]string{},
		started: map[string]chan struct{}{}, canceled: map[string]chan struct{}{},
		active: map[string]int{}, maxOf: map[string]int{},
	}
	t := &tasks{client: client, seen: s}

	t.echo = client.NewStandaloneTask("go-echo", func(ctx hatchet.Context, in msg) (echoOut, error) {
		s.ran(in.Nonce)
		return echoOut{Echo: in, Worker: "go"}, nil
	}, hatchet.WithRetries(0))

	t.dag = client.NewWorkflow("go-dag")
	first := t.dag.NewTask("first", func(ctx hatchet.Context, in msg) (msg, error) {
		return msg{Nonce: in.Nonce, N: in.N + 1}, nil
	})
	t.dag.NewTask("second", func(ctx hatchet.Context, in msg) (msg, error) {
		var out msg
		if err := ctx.ParentOutput(first, &out); err != nil {
			return msg{}, err
		}
		return msg{Nonce: out.Nonce, N: out.N * 10}, nil
	}, hatchet.WithParents(first))

	t.flaky = client.NewStandaloneTask("go-flaky", func(ctx hatchet.Context, in msg) (map[string]int, error) {
		s.ran(in.Nonce)
		if ctx.RetryCount() == 0 {
			return nil, fmt.Errorf("first attempt of %s fails", in.Nonce)
		}
		return map[string]int{"retry_count": ctx.RetryCount()}, nil
	}, hatchet.WithRetries(2), hatchet.WithRetryBackoff(1, 1))

	t.parent = client.NewStandaloneTask("go-parent", func(ctx hatchet.Context, in msg) ([]echoOut, error) {
		var outs []echoOut
		for i := 0; i < 3; i++ {
			res, err := t.echo.Run(ctx, msg{Nonce: in.Nonce, N: i})
			if err != nil {
				return nil, fmt.Errorf("child %d: %w", i, err)
			}
			var out echoOut
			if err := res.Into(&out); err != nil {
				return nil, fmt.Errorf("child %d output: %w", i, err)
			}
			outs = append(outs, out)
		}
		return outs, nil
	})

	t.durable = client.NewStandaloneDurableTask("go-durable", func(ctx hatchet.DurableContext, in msg) (map[string]any, error) {
		began := time.Now()
		if _, err := ctx.SleepFor(time.Second); err != nil {
			return nil, fmt.Errorf("sleep: %w", err)
		}
		slept := time.Since(began)
		got, err := ctx.WaitForEvent("go-interop:evt:"+in.Nonce, "")
		if err != nil {
			return nil, fmt.Errorf("wait for event: %w", err)
		}
		var payload map[string]any
		if err := got.Unmarshal(&payload); err != nil {
			return nil, fmt.Errorf("event payload: %w", err)
		}
		return map[string]any{"slept_ms": slept.Milliseconds(), "event": payload}, nil
	}, hatchet.WithRetries(1))

	t.fails = client.NewWorkflow("go-fails")
	t.fails.NewTask("boom", func(ctx hatchet.Context, in msg) (msg, error) {
		return msg{}, fmt.Errorf("boom %s", in.Nonce)
	}, hatchet.WithRetries(0))
	t.fails.OnFailure(func(ctx hatchet.Context, in msg) (map[string]bool, error) {
		s.mu.Lock()
		s.errors[in.Nonce] = ctx.StepRunErrors()
		s.mu.Unlock()
		return map[string]bool{"handled": true}, nil
	})

	t.slow = client.NewStandaloneTask("go-slow", func(ctx hatchet.Context, in msg) (map[string]bool, error) {
		started, canceled := s.chans(in.Nonce)
		close(started)
		select {
		case <-ctx.Done():
			close(canceled)
			return nil, ctx.Err()
		case <-time.After(60 * time.Second):
			return map[string]bool{"cancelled": false}, nil
		}
	}, hatchet.WithRetries(0), hatchet.WithExecutionTimeout(90*time.Second))

	one := int32(1)
	rr := types.GroupRoundRobin
	t.conc = client.NewStandaloneTask("go-conc", func(ctx hatchet.Context, in msg) (msg, error) {
		s.mu.Lock()
		s.active[in.Group]++
		s.allNow++
		s.maxOf[in.Group] = max(s.maxOf[in.Group], s.active[in.Group])
		s.allMax = max(s.allMax, s.allNow)
		s.mu.Unlock()
		time.Sleep(400 * time.Millisecond)
		s.mu.Lock()
		s.active[in.Group]--
		s.allNow--
		s.mu.Unlock()
		return in, nil
	}, hatchet.WithWorkflowConcurrency(types.Concurrency{
		Expression: "input.group", MaxRuns: &one, LimitStrategy: &rr,
	}))

	unit, limit, minute := 1, "2", types.Minute
	keyExpr := "input.rl_key"
	t.limited = client.NewStandaloneTask("go-limited", func(ctx hatchet.Context, in msg) (msg, error) {
		s.ran(in.Key)
		return in, nil
	}, hatchet.WithRetries(0), hatchet.WithRateLimits(&types.RateLimit{
		Key: "go-limited", KeyExpr: &keyExpr, Units: &unit, LimitValueExpr: &limit, Duration: &minute,
	}))
	return t
}

func nonce() string { return uuid.NewString()[:8] }

// result waits for a run's result, bounded by ctx (the SDK's Result() takes no context).
func result(ctx context.Context, ref *hatchet.WorkflowRunRef) (*hatchet.WorkflowResult, error) {
	type answer struct {
		res *hatchet.WorkflowResult
		err error
	}
	ch := make(chan answer, 1)
	go func() {
		res, err := ref.Result()
		ch <- answer{res, err}
	}()
	select {
	case a := <-ch:
		return a.res, a.err
	case <-ctx.Done():
		return nil, fmt.Errorf("no result for run %s before the check's deadline", ref.RunId)
	}
}

func expect(ok bool, format string, args ...any) error {
	if ok {
		return nil
	}
	return fmt.Errorf(format, args...)
}

func (t *tasks) status(ctx context.Context, runID string) (rest.V1TaskStatus, error) {
	st, err := t.client.Runs().GetStatus(ctx, runID)
	if err != nil {
		return "", err
	}
	return *st, nil
}

func (t *tasks) checks(s *suite) {
	c := t.client

	check("g1", "the Go client runs go-echo on the Go worker", 30*time.Second, func(ctx context.Context) error {
		n := nonce()
		res, err := t.echo.Run(ctx, msg{Nonce: n, N: 7})
		if err != nil {
			return err
		}
		var out echoOut
		if err := res.Into(&out); err != nil {
			return err
		}
		if err := expect(out.Echo.Nonce == n && out.Echo.N == 7 && out.Worker == "go", "output %+v", out); err != nil {
			return err
		}
		return expect(t.seen.count(n) == 1, "%d executions, want 1", t.seen.count(n))
	})

	check("g2", "a go-dag run returns both task outputs", 30*time.Second, func(ctx context.Context) error {
		res, err := t.dag.Run(ctx, msg{Nonce: nonce(), N: 4})
		if err != nil {
			return err
		}
		var a, b msg
		if err := res.TaskOutput("first").Into(&a); err != nil {
			return err
		}
		if err := res.TaskOutput("second").Into(&b); err != nil {
			return err
		}
		return expect(a.N == 5 && b.N == 50, "first %+v second %+v, want n 5 and 50", a, b)
	})

	check("g3", "go-flaky passes its retry after failing its first attempt", 45*time.Second, func(ctx context.Context) error {
		n := nonce()
		res, err := t.flaky.Run(ctx, msg{Nonce: n})
		if err != nil {
			return err
		}
		var out map[string]int
		if err := res.Into(&out); err != nil {
			return err
		}
		if err := expect(out["retry_count"] == 1, "output %v, want retry_count 1", out); err != nil {
			return err
		}
		return expect(t.seen.count(n) == 2, "%d executions, want 2", t.seen.count(n))
	})

	check("g4", "go-parent spawns 3 go-echo children and returns their outputs", 45*time.Second, func(ctx context.Context) error {
		n := nonce()
		res, err := t.parent.Run(ctx, msg{Nonce: n})
		if err != nil {
			return err
		}
		var outs []echoOut
		if err := res.Into(&outs); err != nil {
			return err
		}
		if err := expect(len(outs) == 3, "%d child outputs, want 3: %+v", len(outs), outs); err != nil {
			return err
		}
		for i, o := range outs {
			if err := expect(o.Echo.N == i && o.Echo.Nonce == n && o.Worker == "go", "child %d: %+v", i, o); err != nil {
				return err
			}
		}
		return expect(t.seen.count(n) == 3, "%d child executions, want 3", t.seen.count(n))
	})

	check("g5", "go-durable sleeps durably, then returns the payload of the event it waited for", 60*time.Second, func(ctx context.Context) error {
		n := nonce()
		ref, err := t.durable.RunNoWait(ctx, msg{Nonce: n})
		if err != nil {
			return err
		}
		// An event counts only for a wait registered before it: push until the run ends.
		pushCtx, stopPushing := context.WithCancel(ctx)
		defer stopPushing()
		go func() {
			for pushCtx.Err() == nil {
				_ = c.Events().Push(pushCtx, "go-interop:evt:"+n, map[string]string{"nonce": n, "from": "go-client"})
				select {
				case <-pushCtx.Done():
				case <-time.After(700 * time.Millisecond):
				}
			}
		}()
		res, err := result(ctx, ref)
		if err != nil {
			return err
		}
		var out struct {
			SleptMs int64             `json:"slept_ms"`
			Event   map[string]string `json:"event"`
		}
		if err := res.TaskOutput("go-durable").Into(&out); err != nil {
			return err
		}
		return expect(out.SleptMs >= 900 && out.Event["nonce"] == n, "output %+v, want slept_ms >= 900 and the event's nonce %s", out, n)
	})

	check("g6", "go-fails' on-failure task sees the error; Result() returns it", 45*time.Second, func(ctx context.Context) error {
		n := nonce()
		ref, err := t.fails.RunNoWait(ctx, msg{Nonce: n})
		if err != nil {
			return err
		}
		_, err = result(ctx, ref)
		if err := expect(err != nil && strings.Contains(err.Error(), "boom "+n), "Result() error %v, want one naming boom %s", err, n); err != nil {
			return err
		}
		return waitUntil(ctx, "the on-failure task", 200*time.Millisecond, func() (bool, error) {
			t.seen.mu.Lock()
			errs, ok := t.seen.errors[n]
			t.seen.mu.Unlock()
			if !ok {
				return false, nil
			}
			for task, e := range errs {
				if strings.Contains(task, "boom") && strings.Contains(e, "boom "+n) {
					return true, nil
				}
			}
			return false, fmt.Errorf("StepRunErrors %v lacks boom's error", errs)
		})
	})

	check("g7", "a running go-slow run cancelled with Runs().Cancel", 45*time.Second, func(ctx context.Context) error {
		n := nonce()
		started, canceled := t.seen.chans(n)
		ref, err := t.slow.RunNoWait(ctx, msg{Nonce: n})
		if err != nil {
			return err
		}
		select {
		case <-started:
		case <-ctx.Done():
			return errors.New("go-slow never started")
		}
		id, err := uuid.Parse(ref.RunId)
		if err != nil {
			return err
		}
		if _, err := c.Runs().Cancel(ctx, rest.V1CancelTaskRequest{ExternalIds: &[]uuid.UUID{id}}); err != nil {
			return fmt.Errorf("Runs().Cancel: %w", err)
		}
		select {
		case <-canceled:
		case <-ctx.Done():
			return errors.New("the task's context was never done after the cancel")
		}
		return waitUntil(ctx, "the run to read CANCELLED", 300*time.Millisecond, func() (bool, error) {
			st, err := t.status(ctx, ref.RunId)
			return err == nil && st == rest.V1TaskStatusCANCELLED, nil
		})
	})

	check("g8", "RunMany of 20 go-echo inputs returns 20 results", 60*time.Second, func(ctx context.Context) error {
		n := nonce()
		var inputs []hatchet.RunManyOpt
		for i := 0; i < 20; i++ {
			inputs = append(inputs, hatchet.RunManyOpt{Input: msg{Nonce: n, N: i}})
		}
		refs, err := t.echo.RunMany(ctx, inputs)
		if err != nil {
			return err
		}
		if err := expect(len(refs) == 20, "%d refs, want 20", len(refs)); err != nil {
			return err
		}
		// The Go SDK's RunMany triggers each input on its own goroutine and returns the refs in
		// the order the triggers answered, not the inputs' order: compare as a set.
		got := map[int]bool{}
		for i := range refs {
			res, err := result(ctx, &refs[i])
			if err != nil {
				return fmt.Errorf("run %d: %w", i, err)
			}
			var out echoOut
			if err := res.TaskOutput("go-echo").Into(&out); err != nil {
				return err
			}
			if err := expect(out.Echo.Nonce == n && !got[out.Echo.N], "run %d returned %+v (a repeat, or another check's)", i, out); err != nil {
				return err
			}
			got[out.Echo.N] = true
		}
		return expect(t.seen.count(n) == 20, "%d executions, want 20", t.seen.count(n))
	})

	check("g9", "go-conc: one group's runs never overlap, another group's overlap them", 60*time.Second, func(ctx context.Context) error {
		n := nonce()
		a, b := "a-"+n, "b-"+n
		var inputs []hatchet.RunManyOpt
		for i := 0; i < 4; i++ {
			inputs = append(inputs, hatchet.RunManyOpt{Input: msg{Nonce: n, N: i, Group: a}})
		}
		for i := 0; i < 2; i++ {
			inputs = append(inputs, hatchet.RunManyOpt{Input: msg{Nonce: n, N: i, Group: b}})
		}
		refs, err := t.conc.RunMany(ctx, inputs)
		if err != nil {
			return err
		}
		for i := range refs {
			if _, err := result(ctx, &refs[i]); err != nil {
				return fmt.Errorf("run %d: %w", i, err)
			}
		}
		t.seen.mu.Lock()
		ma, mb, all := t.seen.maxOf[a], t.seen.maxOf[b], t.seen.allMax
		t.seen.mu.Unlock()
		return expect(ma == 1 && mb == 1 && all >= 2, "most at once: group a %d, group b %d, all %d; want 1, 1, >= 2", ma, mb, all)
	})

	check("g10", "go-limited: a dynamic rate limit of 2 a minute runs 2 of 3 runs", 60*time.Second, func(ctx context.Context) error {
		key := "go-rl-" + nonce()
		var refs []*hatchet.WorkflowRunRef
		for i := 0; i < 3; i++ {
			ref, err := t.limited.RunNoWait(ctx, msg{Nonce: key, N: i, Key: key})
			if err != nil {
				return err
			}
			refs = append(refs, ref)
		}
		if err := waitUntil(ctx, "2 executions", 200*time.Millisecond, func() (bool, error) {
			return t.seen.count(key) >= 2, nil
		}); err != nil {
			return err
		}
		// The third run: still QUEUED (read 3 s later), never executed.
		time.Sleep(3 * time.Second)
		var queued []string
		for _, r := range refs {
			st, err := t.status(ctx, r.RunId)
			if err != nil {
				return err
			}
			if st == rest.V1TaskStatusQUEUED {
				queued = append(queued, r.RunId)
			}
		}
		if err := expect(t.seen.count(key) == 2 && len(queued) == 1, "%d executions and %d runs QUEUED, want 2 and 1", t.seen.count(key), len(queued)); err != nil {
			return err
		}
		id, _ := uuid.Parse(queued[0])
		_, err := c.Runs().Cancel(ctx, rest.V1CancelTaskRequest{ExternalIds: &[]uuid.UUID{id}})
		return err
	})

	rustClient := os.Getenv("HATCHET_RUST_CLIENT_BIN")
	check("g11", "our Rust client runs go-echo on the Go worker", 60*time.Second, func(ctx context.Context) error {
		if rustClient == "" {
			return errors.New("HATCHET_RUST_CLIENT_BIN is not set")
		}
		n := nonce()
		input, _ := json.Marshal(msg{Nonce: n, N: 3})
		cmd := exec.CommandContext(ctx, rustClient, "go-echo", string(input))
		cmd.Env = append(os.Environ(), s.clientEnv()...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return fmt.Errorf("the Rust client: %w; stderr: %.500s", err, stderr.String())
		}
		var got echoOut
		if err := json.Unmarshal(out, &got); err != nil {
			// A one-task run's result may come keyed by its task's name.
			var keyed map[string]echoOut
			if err2 := json.Unmarshal(out, &keyed); err2 != nil {
				return fmt.Errorf("the Rust client printed %q: %w", out, err)
			}
			got = keyed["go-echo"]
		}
		if err := expect(got.Echo.Nonce == n && got.Worker == "go", "the Rust client printed %s", out); err != nil {
			return err
		}
		return expect(t.seen.count(n) == 1, "%d executions on the Go worker, want 1", t.seen.count(n))
	})

	rustWorker := os.Getenv("HATCHET_RUST_WORKER_BIN")
	check("g12", "the Go client runs our Rust worker's rust-echo and rust-dag", 90*time.Second, func(ctx context.Context) error {
		if rustWorker == "" {
			return errors.New("HATCHET_RUST_WORKER_BIN is not set")
		}
		w, err := s.start("rust-worker", []string{rustWorker}, s.clientEnv())
		if err != nil {
			return err
		}
		defer s.stop(w, 15*time.Second)
		if err := s.waitRegistered(ctx, rustWorkerName, []string{"rust-echo:echo", "rust-dag:first", "rust-dag:second"}); err != nil {
			return fmt.Errorf("%w (log: %s)", err, filepath.Join(s.work, "rust-worker.log"))
		}
		n := nonce()
		res, err := c.Run(ctx, "rust-echo", msg{Nonce: n, N: 1})
		if err != nil {
			return err
		}
		var echo struct {
			Echo   msg    `json:"echo"`
			Worker string `json:"worker"`
		}
		if err := res.TaskOutput("echo").Into(&echo); err != nil {
			return err
		}
		if err := expect(echo.Echo.Nonce == n && echo.Worker == "rust", "rust-echo returned %+v", echo); err != nil {
			return err
		}
		res, err = c.Run(ctx, "rust-dag", map[string]int{"n": 2})
		if err != nil {
			return err
		}
		var second map[string]int
		if err := res.TaskOutput("second").Into(&second); err != nil {
			return err
		}
		return expect(second["n"] == 30, "rust-dag's second returned %v, want n 30", second)
	})

	t.traceCheck(s) // last: it sets the process's global tracer provider
}
