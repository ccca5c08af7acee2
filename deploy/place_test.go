package deploy

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// manyFiles is a manifest placing n files f/0 … f/n-1, each of size
// bytes, the odd ones executable, and the files of a bundle holding them.
func manyFiles(n, size int) (string, []entry) {
	var m strings.Builder
	m.WriteString("name = \"many\"\nversion = \"1\"\n[install]\nfiles = [\n")
	var es []entry
	for i := range n {
		mode := "0644"
		if i%2 == 1 {
			mode = "0755"
		}
		fmt.Fprintf(&m, "  { from = \"f/%d\", mode = %q },\n", i, mode)
		es = append(es, entry{fmt.Sprintf("f/%d", i), 0o644, compressible(size, byte(i))})
	}
	m.WriteString("]\n[run]\ncommand = [\"/bin/true\"]\n")
	return m.String(), es
}

// BenchmarkPlaceFiles installs the files of a bundle as an install does
// (place), against writing the same bytes to the same names with nothing
// to decompress or check ("plain"), interleaved in the same run: 1,000
// files of 8 KB, the most a manifest places, packed with Zstandard.
// ratio is place's time over plain's.
//
//	go test -run '^$' -bench PlaceFiles -benchtime 10x ./deploy/
func BenchmarkPlaceFiles(b *testing.B) {
	manifest, es := manyFiles(1000, 8<<10)
	data := craftWith(b, zipZstd, framedZstd, append([]entry{{ManifestName, 0o644, []byte(manifest)}}, es...)...)
	bun, err := Open(bytes.NewReader(data), int64(len(data)), Limits{})
	if err != nil {
		b.Fatal(err)
	}
	var placed, plain time.Duration
	for i := 0; i < b.N; i++ {
		dir := b.TempDir()
		t0 := time.Now()
		if err := place(bun, dir, nil, bun.Manifest.Install.Files); err != nil {
			b.Fatal(err)
		}
		placed += time.Since(t0)
		os.RemoveAll(dir)

		dir = b.TempDir()
		t0 = time.Now()
		r, err := os.OpenRoot(dir)
		if err != nil {
			b.Fatal(err)
		}
		r.Mkdir("f", 0o755)
		for _, e := range es {
			f, err := r.OpenFile(e.name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
			if err != nil {
				b.Fatal(err)
			}
			f.Write(e.body)
			f.Close()
		}
		r.Close()
		plain += time.Since(t0)
		os.RemoveAll(dir)
	}
	b.ReportMetric(float64(placed.Nanoseconds())/1e6/float64(b.N), "ms/place")
	b.ReportMetric(float64(plain.Nanoseconds())/1e6/float64(b.N), "ms/plain")
	b.ReportMetric(float64(placed)/float64(plain), "ratio")
}
