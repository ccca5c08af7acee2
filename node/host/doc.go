// Package host reads this machine's values from the operating system: the
// number of processors, total memory, host name, OS and architecture. The
// runtime calls Detect once at start and fills in what the properties file
// does not override. Later issues add live values (free memory, smoothed
// processor utilisation, network speed) refreshed on an interval.
package host
