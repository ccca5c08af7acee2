// Package webtest drives the web UI in a real browser for tests: Debian's
// chromium, headless, through chromedp (never a browser downloaded at test
// time). A test without a browser on the machine skips, unless
// GRIDMGR_REQUIRE_BROWSER=1 (CI sets it), where it fails. With
// GRIDMGR_BROWSER_TESTS=apart the browser tests skip: CI runs them in a
// step of their own, because a browser takes a core and starves the
// timing-sensitive tests of the packages that run beside them.
package webtest
