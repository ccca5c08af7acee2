/*
 * ready: the program BenchmarkSideBySide (sidebyside_test.go) starts
 * under every candidate. Its first instructions open argv[1] (a FIFO the
 * benchmark holds open for reading), write one byte there and wait until
 * killed: the byte's arrival is "the program runs". Further arguments are
 * ignored (the benchmark passes a marker it finds leftovers by).
 *
 * Build it static, so that a container's rootfs needs nothing else:
 *   gcc -O2 -static -o ready deploy/runner/testdata/ready.c
 */
#include <fcntl.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	int fd;

	if (argc < 2)
		return 2;
	fd = open(argv[1], O_WRONLY);
	if (fd < 0 || write(fd, "r", 1) != 1)
		return 1;
	for (;;)
		pause();
}
