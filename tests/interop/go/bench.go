// The Go SDK's side of the end-to-end throughput benchmark (scripts/bench_python.sh,
// benches/python/bench.py side go): a worker and a driver written with the official Go SDK the
// way its documentation shows, so the Go SDK is measured with its own client, as ours is with
// ours and the Python SDK's with its own.
//
//	go-interop bench-worker   # registers go-bench-echo (logs a line, returns its input) as go-bench-worker
//	                          # with BENCH_SLOTS (50) slots; serves until SIGINT or SIGTERM
//	go-interop bench-drive    # the driver protocol of examples/bench_driver.rs:
//	                          #   BENCH_WARMUP runs, then {"event":"warm","failed":N};
//	                          #   one line on stdin; BENCH_TASKS runs, then
//	                          #   {"event":"done","wall_s":..,"trigger_s":..,"failed":N}
//
// The driver triggers with the SDK's RunMany (which starts one TriggerWorkflow call per input
// on its own goroutine), BENCH_CHUNK (500) inputs per call, and waits for each result with
// Result() (the SDK's pooled SubscribeToWorkflowRuns listener). Env: the HATCHET_CLIENT_*
// variables, BENCH_WORKFLOW (go-bench-echo).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	hatchet "github.com/hatchet-dev/hatchet/sdks/go"
)

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

type benchIn struct {
	I int `json:"i"`
}

func benchWorker() error {
	client, err := hatchet.NewClient()
	if err != nil {
		return fmt.Errorf("hatchet.NewClient: %w", err)
	}
	// The same work as the Rust and Python bench tasks: one log line (PutLog), then the input.
	echo := client.NewStandaloneTask("go-bench-echo", func(ctx hatchet.Context, in benchIn) (benchIn, error) {
		ctx.Log("echoing from Go")
		return in, nil
	}, hatchet.WithRetries(0))
	slots := envInt("BENCH_SLOTS", 50)
	worker, err := client.NewWorker("go-bench-worker", hatchet.WithWorkflows(echo), hatchet.WithSlots(slots))
	if err != nil {
		return fmt.Errorf("NewWorker: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	fmt.Printf("go-bench-worker: go-bench-echo, %d slots; SIGTERM or Ctrl-C to stop\n", slots)
	return worker.StartBlocking(ctx)
}

// benchBatch triggers n runs (chunk per RunMany call) and waits for all of them; it returns
// the seconds the triggers took and how many runs failed or were refused.
func benchBatch(client *hatchet.Client, workflow string, first, n, chunk int) (float64, int) {
	t0 := time.Now()
	var refs []hatchet.WorkflowRunRef
	failed := 0
	for at := 0; at < n; at += chunk {
		var inputs []hatchet.RunManyOpt
		for k := at; k < min(at+chunk, n); k++ {
			inputs = append(inputs, hatchet.RunManyOpt{Input: benchIn{I: first + k}})
		}
		got, err := client.RunMany(context.Background(), workflow, inputs)
		if err != nil {
			fmt.Fprintf(os.Stderr, "trigger refused: %v\n", err)
		}
		failed += len(inputs) - len(got)
		refs = append(refs, got...)
	}
	triggerS := time.Since(t0).Seconds()
	var wg sync.WaitGroup
	var bad atomic.Int64
	for i := range refs {
		wg.Add(1)
		go func(ref *hatchet.WorkflowRunRef) {
			defer wg.Done()
			if _, err := ref.Result(); err != nil {
				bad.Add(1)
			}
		}(&refs[i])
	}
	wg.Wait()
	return triggerS, failed + int(bad.Load())
}

func benchDrive() error {
	client, err := hatchet.NewClient()
	if err != nil {
		return fmt.Errorf("hatchet.NewClient: %w", err)
	}
	workflow := os.Getenv("BENCH_WORKFLOW")
	if workflow == "" {
		workflow = "go-bench-echo"
	}
	tasks, warmup, chunk := envInt("BENCH_TASKS", 2000), envInt("BENCH_WARMUP", 20), envInt("BENCH_CHUNK", 500)
	_, warmFailed := benchBatch(client, workflow, 0, warmup, chunk)
	say := func(v map[string]any) {
		line, _ := json.Marshal(v)
		fmt.Println(string(line))
	}
	say(map[string]any{"event": "warm", "failed": warmFailed})
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return fmt.Errorf("waiting for the go line on stdin: %w", err)
	}
	t0 := time.Now()
	triggerS, failed := benchBatch(client, workflow, warmup, tasks, chunk)
	say(map[string]any{"event": "done", "wall_s": time.Since(t0).Seconds(), "trigger_s": triggerS, "failed": failed})
	if failed > 0 {
		os.Exit(1)
	}
	return nil
}

// benchLatency is the Go SDK's row of benchmark 7 (benches/side_by_side/latency.rs): the SDK's
// client runs go-bench-echo (served by a `bench-worker`) with Run and waits for its result, one
// call at a time, BENCH_LATENCY_RUNS (300) times after BENCH_LATENCY_WARMUP (20) warm-up calls.
// Prints one JSON line: {"p50_ms": .., "p99_ms": .., "n": ..}.
func benchLatency() error {
	client, err := hatchet.NewClient()
	if err != nil {
		return fmt.Errorf("hatchet.NewClient: %w", err)
	}
	runs, warmup := envInt("BENCH_LATENCY_RUNS", 300), envInt("BENCH_LATENCY_WARMUP", 20)
	samples := make([]float64, 0, runs)
	for i := 0; i < warmup+runs; i++ {
		t0 := time.Now()
		if _, err := client.Run(context.Background(), "go-bench-echo", benchIn{I: i}); err != nil {
			return fmt.Errorf("run %d: %w", i, err)
		}
		if i >= warmup {
			samples = append(samples, float64(time.Since(t0).Microseconds())/1000)
		}
	}
	sort.Float64s(samples)
	pct := func(p float64) float64 { return samples[min(len(samples)-1, int(p*float64(len(samples))))] }
	line, _ := json.Marshal(map[string]any{"p50_ms": pct(0.5), "p99_ms": pct(0.99), "n": len(samples)})
	fmt.Println(string(line))
	return nil
}

// benchOutage is the Go SDK's side of benchmark 4 (outage amplification,
// benches/side_by_side.rs): BENCH_OUTAGE_READERS (20) readers on one client, each calling
// GetEngineVersion (the Dispatcher's GetVersion, through the SDK's own gRPC retry interceptor)
// once a second. Prints {"event":"ready"} once the client exists, waits for one line on stdin,
// runs for BENCH_OUTAGE_SECS (20) s, then prints {"event":"done","operations":N} (the reads
// started) and exits without waiting for the reads still in their backoff.
func benchOutage() error {
	client, err := hatchet.NewClient()
	if err != nil {
		return fmt.Errorf("hatchet.NewClient: %w", err)
	}
	readers, secs := envInt("BENCH_OUTAGE_READERS", 20), envInt("BENCH_OUTAGE_SECS", 20)
	fmt.Println(`{"event":"ready"}`)
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return fmt.Errorf("waiting for the go line on stdin: %w", err)
	}
	var ops atomic.Int64
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(secs)*time.Second)
	defer cancel()
	for r := 0; r < readers; r++ {
		go func() {
			for ctx.Err() == nil {
				ops.Add(1)
				_, _ = client.GetEngineVersion(ctx)
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
			}
		}()
	}
	<-ctx.Done()
	fmt.Printf("{\"event\":\"done\",\"operations\":%d}\n", ops.Load())
	os.Exit(0)
	return nil
}

// benchReconnect is the Go SDK's side of benchmark 3 (10,000 waiters across an engine
// restart, benches/side_by_side.rs): triggers BENCH_RECONNECT_RUNS (10000) runs of
// BENCH_WORKFLOW (noop; no worker serves it, the benchmark completes the runs itself) with
// RunMany, awaits every result with Result() (the SDK's pooled SubscribeToWorkflowRuns
// listener), prints `waiting`, then `done <results> <errors>` once every result arrived, or
// after BENCH_RECONNECT_WAIT_S (100) s with what arrived by then.
func benchReconnect() error {
	client, err := hatchet.NewClient()
	if err != nil {
		return fmt.Errorf("hatchet.NewClient: %w", err)
	}
	workflow := os.Getenv("BENCH_WORKFLOW")
	if workflow == "" {
		workflow = "noop"
	}
	n, chunk := envInt("BENCH_RECONNECT_RUNS", 10000), envInt("BENCH_CHUNK", 500)
	var refs []hatchet.WorkflowRunRef
	for at := 0; at < n; at += chunk {
		var inputs []hatchet.RunManyOpt
		for k := at; k < min(at+chunk, n); k++ {
			inputs = append(inputs, hatchet.RunManyOpt{Input: benchIn{I: k}})
		}
		got, err := client.RunMany(context.Background(), workflow, inputs)
		if err != nil {
			return fmt.Errorf("RunMany: %w", err)
		}
		refs = append(refs, got...)
	}
	var ok, bad atomic.Int64
	all := make(chan struct{})
	var wg sync.WaitGroup
	for i := range refs {
		wg.Add(1)
		go func(ref *hatchet.WorkflowRunRef) {
			defer wg.Done()
			if _, err := ref.Result(); err != nil {
				bad.Add(1)
			} else {
				ok.Add(1)
			}
		}(&refs[i])
	}
	go func() { wg.Wait(); close(all) }()
	fmt.Println("waiting")
	select {
	case <-all:
	case <-time.After(time.Duration(envInt("BENCH_RECONNECT_WAIT_S", 100)) * time.Second):
	}
	fmt.Printf("done %d %d\n", ok.Load(), bad.Load())
	os.Exit(0)
	return nil
}
