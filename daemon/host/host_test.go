package host

import "testing"

func TestDetect(t *testing.T) {
	in, err := Detect()
	if err != nil {
		t.Fatal(err)
	}
	if in.CPUs < 1 || in.Memory < 64<<20 || in.OS == "" || in.Arch == "" {
		t.Fatalf("implausible host values: %+v", in)
	}
}
