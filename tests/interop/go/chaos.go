// The Go SDK's side of the chaos suite (scripts/chaos-real.sh with CHAOS_PEER=go): a worker
// written with the official Go SDK as its documentation shows, with the chaos suite's three
// workflows (examples/chaos_suite.rs: chaos-dag `a` then `b`, chaos-single `t`, chaos-durable
// `d` sleeping 2 s durably), each idempotent on input.k, so our chaos client drives it and counts
// its results exactly as it does ours.
//
//	go-interop chaos-worker --dir D [--slots N]
//
// Every execution is appended to D/exec.log before it runs (task, key, retry count, pid, epoch
// ms: the suite's format). With CHAOS_TASK_DEFAULTS=1 the tasks keep the SDK's defaults (a new
// user's options); otherwise they get the suite's 3 retries and 30 s timeout. It prints a line
// with `serving` once the worker started, and serves until SIGINT or SIGTERM.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	hatchet "github.com/hatchet-dev/hatchet/sdks/go"
)

type chaosIn struct {
	K string `json:"k"`
}

// chaosRecord appends one execution to exec.log in a single write.
func chaosRecord(log, task string, ctx hatchet.Context, in chaosIn) error {
	f, err := os.OpenFile(log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("cannot open %s: %w", log, err)
	}
	defer f.Close()
	line := fmt.Sprintf("%s\t%s\t%d\t%d\t%d\n", task, in.K, ctx.RetryCount(), os.Getpid(), time.Now().UnixMilli())
	_, err = f.WriteString(line)
	return err
}

// chaosWork is the suite's short, varied amount of work.
func chaosWork(k string) {
	sum := 0
	for _, b := range []byte(k) {
		sum += int(b)
	}
	time.Sleep(time.Duration(20+sum%180) * time.Millisecond)
}

func chaosWorker(args []string) error {
	fs := flag.NewFlagSet("chaos-worker", flag.ContinueOnError)
	dir := fs.String("dir", "", "where exec.log lives")
	slots := fs.Int("slots", 16, "slots")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" {
		return fmt.Errorf("--dir D is needed (where exec.log lives)")
	}
	log := filepath.Join(*dir, "exec.log")
	client, err := hatchet.NewClient()
	if err != nil {
		return fmt.Errorf("hatchet.NewClient: %w", err)
	}
	var opts []hatchet.TaskOption
	if os.Getenv("CHAOS_TASK_DEFAULTS") != "1" {
		opts = append(opts, hatchet.WithRetries(3), hatchet.WithExecutionTimeout(30*time.Second))
	}
	idem := hatchet.WithWorkflowIdempotency(hatchet.IdempotencyConfig{Expression: "input.k", TTL: time.Hour})

	dag := client.NewWorkflow("chaos-dag", idem)
	a := dag.NewTask("a", func(ctx hatchet.Context, in chaosIn) (map[string]any, error) {
		if err := chaosRecord(log, "a", ctx, in); err != nil {
			return nil, err
		}
		chaosWork(in.K)
		return map[string]any{"k": in.K, "a": 1}, nil
	}, opts...)
	dag.NewTask("b", func(ctx hatchet.Context, in chaosIn) (map[string]any, error) {
		if err := chaosRecord(log, "b", ctx, in); err != nil {
			return nil, err
		}
		var out struct {
			A int `json:"a"`
		}
		if err := ctx.ParentOutput(a, &out); err != nil {
			return nil, err
		}
		chaosWork(in.K)
		return map[string]any{"k": in.K, "b": out.A + 1}, nil
	}, append([]hatchet.TaskOption{hatchet.WithParents(a)}, opts...)...)

	single := client.NewWorkflow("chaos-single", idem)
	single.NewTask("t", func(ctx hatchet.Context, in chaosIn) (map[string]any, error) {
		if err := chaosRecord(log, "t", ctx, in); err != nil {
			return nil, err
		}
		chaosWork(in.K)
		return map[string]any{"k": in.K, "single": true}, nil
	}, opts...)

	durable := client.NewWorkflow("chaos-durable", idem)
	durable.NewDurableTask("d", func(ctx hatchet.DurableContext, in chaosIn) (map[string]any, error) {
		if err := chaosRecord(log, "d", ctx, in); err != nil {
			return nil, err
		}
		if _, err := ctx.SleepFor(2 * time.Second); err != nil {
			return nil, fmt.Errorf("sleep: %w", err)
		}
		return map[string]any{"k": in.K, "durable": true}, nil
	}, opts...)

	worker, err := client.NewWorker("chaos-worker", hatchet.WithWorkflows(dag, single, durable),
		hatchet.WithSlots(*slots), hatchet.WithDurableSlots(*slots))
	if err != nil {
		return fmt.Errorf("NewWorker: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	cleanup, err := worker.Start()
	if err != nil {
		return fmt.Errorf("worker.Start: %w", err)
	}
	fmt.Fprintf(os.Stderr, "go chaos worker (pid %d) serving\n", os.Getpid())
	<-ctx.Done()
	return cleanup()
}
