// Package host reads this machine's values from the operating system: the
// number of processors, total and available memory, processor utilisation
// (smoothed with a 30 s time constant), the speed of the fastest network
// link, host name, OS and architecture.
//
// The runtime calls Detect once at start, and keeps one Sampler whose
// Sample it calls on the configured interval (resources.refresh), handing
// the readings to the manager's Core. Values that cannot be read are left
// "unknown" (utilisation -1, link speed 0) and named in Sample.Errors, so
// queries that read them do not match instead of matching on a guess.
package host
