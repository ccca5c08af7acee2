package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode"
)

// idleAfter is how long the service must greet no one to say it is idle.
const idleAfter = 30 * time.Second

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run does what args ask and returns the exit code: 0 done, 1 failed,
// 2 bad usage.
func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("hello", flag.ContinueOnError)
	fs.SetOutput(stderr)
	initDir := fs.String("init", "", "install time: create `DIR` and write DIR/initialized")
	listen := fs.String("listen", "", "serve HTTP on `ADDR` and turn input/*.txt into output/")
	reload := fs.String("reload", "", "ask the service at `ADDR` to re-read the greeting")
	stats := fs.String("stats", "", "print the values of the service at `ADDR`")
	greet := fs.Bool("greet", false, "print a greeting for each NAME that follows")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: hello --init DIR | --listen ADDR | --reload ADDR | --stats ADDR | --greet NAME...")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2 // flag has printed the error and the usage
	}
	var modes []string
	fs.Visit(func(f *flag.Flag) { modes = append(modes, f.Name) })
	usage := func(msg string) int {
		fmt.Fprintln(stderr, "hello:", msg)
		fs.Usage()
		return 2
	}
	if len(modes) != 1 {
		return usage("give exactly one of --init, --listen, --reload, --stats, --greet")
	}
	mode := modes[0]
	switch {
	case mode == "greet" && (!*greet || fs.NArg() == 0):
		return usage("--greet needs at least one NAME")
	case mode != "greet" && fs.NArg() > 0:
		return usage(fmt.Sprintf("unexpected argument %q", fs.Arg(0)))
	case mode != "greet" && fs.Lookup(mode).Value.String() == "":
		return usage("--" + mode + " needs a value")
	}

	var err error
	switch mode {
	case "init":
		err = initialize(*initDir, time.Now())
	case "listen":
		err = listenAndServe(*listen, stdout, stderr)
	case "reload":
		err = call(http.MethodPost, *reload, "/reload", stdout)
	case "stats":
		err = call(http.MethodGet, *stats, "/stats", stdout)
	case "greet":
		var greeting string
		if greeting, err = loadGreeting(os.Getenv("GREETING_FILE")); err == nil {
			for _, name := range fs.Args() {
				fmt.Fprintln(stdout, greetingFor(greeting, name))
			}
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "hello:", err)
		return 1
	}
	return 0
}

// initialize is the install-time customisation: it creates dir and
// writes dir/initialized with the time.
func initialize(dir string, now time.Time) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "initialized"), []byte(now.UTC().Format(time.RFC3339)+"\n"), 0o644)
}

// loadGreeting reads the greeting from file: "Hello" when file is ""
// or holds only spaces.
func loadGreeting(file string) (string, error) {
	if file == "" {
		return "Hello", nil
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("reading the greeting: %w", err)
	}
	if g := strings.TrimSpace(string(data)); g != "" {
		return g, nil
	}
	return "Hello", nil
}

func greetingFor(greeting, name string) string { return greeting + ", " + name + "!" }

// call sends method path to the service at addr and prints its answer.
func call(method, addr, path string, stdout io.Writer) error {
	req, err := http.NewRequest(method, "http://"+addr+path, nil)
	if err != nil {
		return err
	}
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %s: %s", method, req.URL, resp.Status, strings.TrimSpace(string(body)))
	}
	_, err = stdout.Write(body)
	return err
}

// server is the service's state.
type server struct {
	greetingFile string
	now          func() time.Time // the clock of /idle; time.Now but in tests

	mu       sync.Mutex
	greeting string
	requests int       // greetings served over HTTP
	last     string    // the last name greeted (HTTP or batch)
	lastAt   time.Time // when
}

func newServer(greetingFile string) (*server, error) {
	g, err := loadGreeting(greetingFile)
	if err != nil {
		return nil, err
	}
	return &server{greetingFile: greetingFile, now: time.Now, greeting: g}, nil
}

// greet returns the greeting for name and records it.
func (s *server) greet(name string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last, s.lastAt = oneLine(name), s.now()
	return greetingFor(s.greeting, name)
}

// oneLine keeps a name on one line of printable characters for /stats.
func oneLine(s string) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
	return strings.Join(strings.Fields(s), " ")
}

func (s *server) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		name := r.URL.Query().Get("name")
		if name == "" {
			name = "world"
		}
		msg := s.greet(name)
		s.mu.Lock()
		s.requests++
		s.mu.Unlock()
		reply(w, http.StatusOK, msg)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		reply(w, http.StatusOK, "ok")
	})
	mux.HandleFunc("GET /idle", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		idle := s.now().Sub(s.lastAt) >= idleAfter
		s.mu.Unlock()
		if idle {
			reply(w, http.StatusOK, "idle")
		} else {
			reply(w, http.StatusServiceUnavailable, "busy")
		}
	})
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		msg := "requests " + strconv.Itoa(s.requests)
		if s.last != "" {
			msg += "\nlast_greeting " + s.last
		}
		s.mu.Unlock()
		reply(w, http.StatusOK, msg)
	})
	mux.HandleFunc("POST /reload", func(w http.ResponseWriter, r *http.Request) {
		g, err := loadGreeting(s.greetingFile)
		if err != nil {
			reply(w, http.StatusInternalServerError, err.Error())
			return
		}
		s.mu.Lock()
		s.greeting = g
		s.mu.Unlock()
		reply(w, http.StatusOK, "greeting: "+g)
	})
	return mux
}

// reply answers a line of plain text.
func reply(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	fmt.Fprintln(w, msg)
}

// batch turns each in/NAME.txt (one name a line) into out/NAME.txt (one
// greeting a line), then removes the input. It goes on past a file it
// cannot do and returns what went wrong.
func (s *server) batch(in, out string) error {
	entries, err := os.ReadDir(in)
	if errors.Is(err, os.ErrNotExist) {
		return nil // nothing was ever put
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if !e.Type().IsRegular() || !strings.HasSuffix(e.Name(), ".txt") {
			continue
		}
		src := filepath.Join(in, e.Name())
		data, err := os.ReadFile(src)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var b strings.Builder
		for line := range strings.Lines(string(data)) {
			if name := strings.TrimSpace(line); name != "" {
				b.WriteString(s.greet(name) + "\n")
			}
		}
		if err := os.MkdirAll(out, 0o755); err != nil {
			return errors.Join(append(errs, err)...)
		}
		if err := writeAtomic(filepath.Join(out, e.Name()), []byte(b.String())); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := os.Remove(src); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// writeAtomic writes name through a temporary file in the same directory,
// synced and renamed over it, so a reader sees all of it or nothing.
func writeAtomic(name string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(name), "."+filepath.Base(name)+".*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // nothing left to remove once renamed
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(0o644)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(f.Name(), name)
}

// listenAndServe is --listen: it serves until SIGTERM or SIGINT.
func listenAndServe(addr string, stdout, stderr io.Writer) error {
	s, err := newServer(os.Getenv("GREETING_FILE"))
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return s.serve(ctx, ln, "input", "output", stdout, stderr)
}

// serve answers HTTP on ln and does the batch work of in every second
// until ctx is done, then shuts down gracefully.
func (s *server) serve(ctx context.Context, ln net.Listener, in, out string, stdout, stderr io.Writer) error {
	srv := &http.Server{Handler: s.handler(), ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stdout, "hello: serving on %s, greeting %q\n", ln.Addr(), s.greeting)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case err := <-served:
			return err // it could not serve
		case <-tick.C:
			if err := s.batch(in, out); err != nil {
				fmt.Fprintln(stderr, "hello: batch:", err)
			}
		case <-ctx.Done():
			// Within the manifest's stop_grace (5s), after which it is killed.
			sctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			err := srv.Shutdown(sctx)
			fmt.Fprintln(stdout, "hello: stopped")
			return err
		}
	}
}
