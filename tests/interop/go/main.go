// Interop proof: the official Go SDK (github.com/hatchet-dev/hatchet/sdks/go, pinned in go.mod
// at the release scripts/real-engine.sh runs) against hatchet-dev-engine, or against the real
// engine when HATCHET_REAL_ENGINE=1 (the HATCHET_CLIENT_* variables of scripts/real-engine.sh
// env), plus our Rust example worker and client.
//
// Starts the engine as the Python and TypeScript suites do (`-handshake-file F -grpc-port 0
// -api-port 0`, stdin a pipe; it exits when stdin closes), a Go worker in this process (the
// tasks in tasks.go) and our Rust example worker, then runs one counted check each (lines
// `PASS <id> ...` / `FAIL <id> ...`, each bounded by a timeout):
//
//	g1  the Go client runs go-echo (a standalone task) on the Go worker and gets its output
//	g2  a go-dag run returns both task outputs; the second read the first's through ParentOutput
//	g3  go-flaky fails its first attempt and passes its retry: 2 executions, RetryCount 1
//	g4  go-parent spawns 3 go-echo children from inside its task and returns their outputs
//	g5  go-durable sleeps 1 s durably, then waits for an event the client pushes, and returns
//	    the event's payload
//	g6  go-fails' task fails; its on-failure task sees the error through StepRunErrors, and the
//	    client's Result() returns the task's error
//	g7  a running go-slow run cancelled with Runs().Cancel: the task's context is done, and the
//	    run reads CANCELLED
//	g8  RunMany of 20 go-echo inputs: 20 results, each its own input, one execution each
//	g9  go-conc (workflow concurrency, input.group, 1 run per group, GROUP_ROUND_ROBIN): 4 runs
//	    of one group never overlap, while another group's runs overlap them
//	g10 go-limited (a dynamic rate limit, 2 units a minute per key): of 3 runs with one key, 2
//	    execute and the third stays QUEUED, not executed
//	g11 our Rust client binary runs go-echo on the Go worker
//	g12 the Go client runs our Rust worker's rust-echo and rust-dag
//	g13 traces (the SDK's opentelemetry Instrumentor, its middleware on a worker of its own):
//	    a run's trace holds the client's hatchet.run_workflow, the worker's
//	    hatchet.start_step_run with the task's own span under it, and the engine's
//	    workflow_run, queued and start_step_run, once each in one trace (6); an event's run has
//	    hatchet.push_event and hatchet.engine.event in place of run_workflow (7)
//
// `go-interop bench-worker`, `bench-drive`, `bench-latency`, `bench-outage` and
// `bench-reconnect` are the Go SDK's side of the
// throughput benchmark (bench.go); `chaos-worker` its side of the chaos suite (chaos.go).
//
// Env: HATCHET_DEV_ENGINE_BIN (our engine; unused on the real engine), HATCHET_RUST_WORKER_BIN
// and HATCHET_RUST_CLIENT_BIN (g11, g12), INTEROP_PIDFILE (optional: child pids for run.sh's
// trap), INTEROP_KEEP=1 keeps the work dir. Last line: `go: N passed, M failed`; exit 1 on any
// failure.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	hatchet "github.com/hatchet-dev/hatchet/sdks/go"
)

const goWorkerName = "go-interop-worker"
const rustWorkerName = "rust-worker" // the name examples/worker.rs registers with

var passed, failed int

func logf(format string, args ...any) {
	fmt.Printf("[go-interop %s] %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

// check runs one counted check, bounded by `limit`; a check fails by returning an error. On
// the real engine a failed check runs once more, reported as `FLAKY id: why` first (run.sh
// lists those at the end): its read models and caches settle within seconds, not at once.
// Checks listed as known failures there (INTEROP_REAL_ENGINE_KNOWN) get one attempt, and on
// our engine every check gets one.
func check(id, what string, limit time.Duration, fn func(ctx context.Context) error) {
	attempts := 1
	if os.Getenv("HATCHET_REAL_ENGINE") == "1" && !slices.Contains(strings.Fields(os.Getenv("INTEROP_REAL_ENGINE_KNOWN")), id) {
		attempts = 2
	}
	start := time.Now()
	var err error
	for attempt := 1; attempt <= attempts; attempt++ {
		err = attemptCheck(limit, fn)
		if err == nil {
			break
		}
		if attempt < attempts {
			fmt.Printf("FLAKY %s %s: first attempt: %v\n", id, what, err)
		}
	}
	took := time.Since(start).Round(time.Millisecond)
	if err != nil {
		failed++
		fmt.Printf("FAIL %s %s (%s): %v\n", id, what, took, err)
	} else {
		passed++
		fmt.Printf("PASS %s %s (%s)\n", id, what, took)
	}
}

// attemptCheck runs `fn` once, bounded by `limit`.
func attemptCheck(limit time.Duration, fn func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				done <- fmt.Errorf("panicked: %v", r)
			}
		}()
		done <- fn(ctx)
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("timed out after %s", limit)
	}
}

// waitUntil polls `probe` every `every` until it returns true, an error, or ctx ends.
func waitUntil(ctx context.Context, what string, every time.Duration, probe func() (bool, error)) error {
	for {
		ok, err := probe()
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("gave up waiting for %s", what)
		case <-time.After(every):
		}
	}
}

// handshake is what our engine writes to -handshake-file once it serves.
type handshake struct {
	Token       string `json:"token"`
	TenantID    string `json:"tenant_id"`
	GrpcAddress string `json:"grpc_address"`
	APIURL      string `json:"api_url"`
}

type suite struct {
	work    string
	hs      handshake
	engine  *exec.Cmd
	stdin   io.WriteCloser
	pidfile string
}

// notePid appends a line to run.sh's pid file: "-PGID" for a group to kill on exit, "done
// -PGID" for one already stopped.
func (s *suite) notePid(line string) {
	if s.pidfile == "" {
		return
	}
	if f, err := os.OpenFile(s.pidfile, os.O_APPEND|os.O_WRONLY, 0o644); err == nil {
		fmt.Fprintln(f, line)
		_ = f.Close()
	}
}

func (s *suite) rememberPid(pid int) { s.notePid(fmt.Sprintf("-%d", pid)) }
func (s *suite) forgetPid(pid int)   { s.notePid(fmt.Sprintf("done -%d", pid)) }

// start runs argv in its own process group with its output in <work>/<name>.log.
func (s *suite) start(name string, argv []string, env []string) (*exec.Cmd, error) {
	out, err := os.Create(filepath.Join(s.work, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout = out
	cmd.Stderr = out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s (%s): %w", name, argv[0], err)
	}
	s.rememberPid(cmd.Process.Pid)
	return cmd, nil
}

// stop sends SIGTERM to the process group, then SIGKILL after `grace`.
func (s *suite) stop(cmd *exec.Cmd, grace time.Duration) {
	if cmd == nil || cmd.Process == nil {
		return
	}
	pid := cmd.Process.Pid
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	select {
	case <-exited:
	case <-time.After(grace):
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		<-exited
	}
	s.forgetPid(pid)
}

// startEngine starts our engine and waits for its handshake; on the real engine it reads the
// HATCHET_CLIENT_* variables instead.
func (s *suite) startEngine() error {
	if os.Getenv("HATCHET_REAL_ENGINE") == "1" {
		s.hs = handshake{
			Token:       os.Getenv("HATCHET_CLIENT_TOKEN"),
			TenantID:    os.Getenv("HATCHET_CLIENT_TENANT_ID"),
			GrpcAddress: os.Getenv("HATCHET_CLIENT_HOST_PORT"),
			APIURL:      os.Getenv("HATCHET_CLIENT_SERVER_URL"),
		}
		if s.hs.Token == "" || s.hs.TenantID == "" || s.hs.GrpcAddress == "" || s.hs.APIURL == "" {
			return errors.New("HATCHET_REAL_ENGINE=1 needs HATCHET_CLIENT_TOKEN, _TENANT_ID, _HOST_PORT and _SERVER_URL (eval \"$(scripts/real-engine.sh env)\")")
		}
		return nil
	}
	bin := os.Getenv("HATCHET_DEV_ENGINE_BIN")
	if bin == "" {
		return errors.New("set HATCHET_DEV_ENGINE_BIN to the hatchet-dev-engine binary (or HATCHET_REAL_ENGINE=1 with the real engine's env)")
	}
	hsPath := filepath.Join(s.work, "handshake.json")
	log, err := os.Create(filepath.Join(s.work, "engine.log"))
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, "-handshake-file", hsPath, "-grpc-port", "0", "-api-port", "0")
	cmd.Stdout = io.Discard
	cmd.Stderr = log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting the engine %s: %w", bin, err)
	}
	s.rememberPid(cmd.Process.Pid)
	s.engine, s.stdin = cmd, stdin
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return waitUntil(ctx, "the engine's handshake file", 100*time.Millisecond, func() (bool, error) {
		raw, err := os.ReadFile(hsPath)
		if err != nil {
			return false, nil
		}
		return json.Unmarshal(raw, &s.hs) == nil && s.hs.Token != "", nil
	})
}

// clientEnv is the HATCHET_CLIENT_* environment the SDKs (and our runtime) read.
func (s *suite) clientEnv() []string {
	return []string{
		"HATCHET_CLIENT_TOKEN=" + s.hs.Token,
		"HATCHET_CLIENT_HOST_PORT=" + s.hs.GrpcAddress,
		"HATCHET_CLIENT_SERVER_URL=" + s.hs.APIURL,
		"HATCHET_CLIENT_API_URL=" + s.hs.APIURL,
		"HATCHET_CLIENT_TENANT_ID=" + s.hs.TenantID,
		"HATCHET_CLIENT_TLS_STRATEGY=none",
	}
}

// restGet reads a REST path of the engine with the token.
func (s *suite) restGet(ctx context.Context, path string, into any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.hs.APIURL+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+s.hs.Token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: HTTP %d %.300s", path, res.StatusCode, body)
	}
	return json.Unmarshal(body, into)
}

// waitRegistered waits until the worker named `name` reads ACTIVE with every action in `actions`.
func (s *suite) waitRegistered(ctx context.Context, name string, actions []string) error {
	return waitUntil(ctx, fmt.Sprintf("worker %s ACTIVE with %v", name, actions), 300*time.Millisecond, func() (bool, error) {
		var list struct {
			Rows []struct {
				Name    string   `json:"name"`
				Status  string   `json:"status"`
				Actions []string `json:"actions"`
			} `json:"rows"`
		}
		if err := s.restGet(ctx, "/api/v1/tenants/"+s.hs.TenantID+"/worker", &list); err != nil {
			return false, nil
		}
		for _, w := range list.Rows {
			if w.Name != name || w.Status != "ACTIVE" {
				continue
			}
			have := map[string]bool{}
			for _, a := range w.Actions {
				have[a] = true
			}
			all := true
			for _, a := range actions {
				all = all && have[a]
			}
			if all {
				return true, nil
			}
		}
		return false, nil
	})
}

func (s *suite) stopEngine() {
	if s.engine == nil {
		return
	}
	_ = s.stdin.Close()
	exited := make(chan struct{})
	go func() { _ = s.engine.Wait(); close(exited) }()
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-s.engine.Process.Pid, syscall.SIGKILL)
		<-exited
	}
	s.forgetPid(s.engine.Process.Pid)
	s.engine = nil
}

func main() {
	if len(os.Args) > 1 && os.Args[1] != "suite" {
		var err error
		switch os.Args[1] {
		case "bench-worker":
			err = benchWorker()
		case "bench-drive":
			err = benchDrive()
		case "bench-latency":
			err = benchLatency()
		case "bench-outage":
			err = benchOutage()
		case "bench-reconnect":
			err = benchReconnect()
		case "chaos-worker":
			err = chaosWorker(os.Args[2:])
		default:
			err = fmt.Errorf("unknown command %q: suite (the default), bench-worker, bench-drive, bench-latency, bench-outage, bench-reconnect or chaos-worker", os.Args[1])
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "go-interop %s: %v\n", os.Args[1], err)
			os.Exit(1)
		}
		return
	}
	if err := run(); err != nil {
		fmt.Printf("FAIL setup %v\n", err)
		failed++
	}
	fmt.Printf("go: %d passed, %d failed\n", passed, failed)
	if failed > 0 {
		os.Exit(1)
	}
}

func run() error {
	work, err := os.MkdirTemp(os.Getenv("TMPDIR"), "hatchet-interop-go-")
	if err != nil {
		return err
	}
	s := &suite{work: work, pidfile: os.Getenv("INTEROP_PIDFILE")}
	logf("work dir %s", work)
	defer func() {
		if os.Getenv("INTEROP_KEEP") != "1" && failed == 0 {
			_ = os.RemoveAll(work)
		}
	}()
	// The SDK reads .hatchet.yaml from the current directory: keep it clean.
	if err := os.Chdir(work); err != nil {
		return err
	}
	if err := s.startEngine(); err != nil {
		return err
	}
	defer s.stopEngine()
	for _, kv := range s.clientEnv() {
		k, v, _ := strings.Cut(kv, "=")
		if err := os.Setenv(k, v); err != nil {
			return err
		}
	}
	client, err := hatchet.NewClient()
	if err != nil {
		return fmt.Errorf("hatchet.NewClient: %w", err)
	}
	t := declare(client)
	worker, err := client.NewWorker(goWorkerName,
		hatchet.WithWorkflows(t.all()...),
		hatchet.WithSlots(30),
		hatchet.WithDurableSlots(10),
	)
	if err != nil {
		return fmt.Errorf("NewWorker: %w", err)
	}
	stopWorker, err := worker.Start()
	if err != nil {
		return fmt.Errorf("worker.Start: %w", err)
	}
	defer func() {
		if err := stopWorker(); err != nil {
			logf("stopping the Go worker: %v", err)
		}
	}()
	{
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := s.waitRegistered(ctx, goWorkerName, []string{"go-echo:go-echo", "go-dag:first", "go-dag:second"})
		cancel()
		if err != nil {
			return err
		}
	}
	t.checks(s)
	return nil
}
