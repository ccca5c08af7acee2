package webtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// ExecPath finds the installed chromium ("" if none).
func ExecPath() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// Browser starts a headless browser for t; cancel ends it (t.Cleanup
// does too).
func Browser(t testing.TB) (context.Context, context.CancelFunc) {
	t.Helper()
	if os.Getenv("GRIDMGR_BROWSER_TESTS") == "apart" {
		t.Skip("GRIDMGR_BROWSER_TESTS=apart: the browser tests run in a step of their own")
	}
	path := ExecPath()
	if path == "" {
		if os.Getenv("GRIDMGR_REQUIRE_BROWSER") != "" {
			t.Fatal("no chromium on this machine (apt-get install chromium), and GRIDMGR_REQUIRE_BROWSER is set")
		}
		t.Skip("no chromium on this machine (apt-get install chromium): the browser test is skipped")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true), // the tests run as root
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1400, 900),
		// At the lowest priority, so that the browser does not starve the
		// heartbeat-timed tests of packages that run beside it.
		chromedp.ModifyCmdFunc(func(cmd *exec.Cmd) {
			if nice, err := exec.LookPath("nice"); err == nil {
				cmd.Args = append([]string{"nice", "-n", "19", cmd.Path}, cmd.Args[1:]...)
				cmd.Path = nice
			}
		}),
	)
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	stop := func() { cancel(); acancel() }
	t.Cleanup(stop)
	// Start it now, so that a browser that cannot start fails here. (The
	// first run must use ctx itself: the browser lives as long as the
	// context of its first run.)
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting %s: %v", path, err)
	}
	return ctx, stop
}

// ArtifactDir is where screenshots go: $GRIDMGR_ARTIFACTS, else a
// temporary directory of t.
func ArtifactDir(t testing.TB) string {
	if d := os.Getenv("GRIDMGR_ARTIFACTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err == nil {
			return d
		}
	}
	return t.TempDir()
}

// Screenshot saves the page as PNG to ArtifactDir(t)/name.
func Screenshot(t testing.TB, ctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // 100: PNG
	if err != nil {
		t.Logf("screenshot %s: %v", name, err)
		return
	}
	p := filepath.Join(ArtifactDir(t), name)
	if err := os.WriteFile(p, png, 0o644); err != nil {
		t.Logf("screenshot %s: %v", name, err)
		return
	}
	t.Logf("screenshot: %s", p)
}

// Eval evaluates a JavaScript expression whose value is JSON of type T.
func Eval[T any](ctx context.Context, expr string) (T, error) {
	return chromedp.Run(ctx, chromedp.Evaluate[T](expr))
}

// Navigate opens url in the tab.
func Navigate(ctx context.Context, url string) error {
	return chromedp.Do(ctx, chromedp.Navigate(url))
}

// WaitFor polls a JavaScript boolean expression until it is true or
// within passes; it returns how long it took.
func WaitFor(ctx context.Context, expr string, within time.Duration) (time.Duration, error) {
	start := time.Now()
	for {
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](expr))
		if err == nil && ok {
			return time.Since(start), nil
		}
		if time.Since(start) > within {
			return time.Since(start), fmt.Errorf("%s not true within %v (last error: %v)", expr, within, err)
		}
		time.Sleep(25 * time.Millisecond) // polling the page
	}
}
