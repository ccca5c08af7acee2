// Command barehost is the baseline for gridmgr's memory figures: a libp2p
// host with the same transport stack as a manager (TCP + Noise + yamux,
// relay off, one explicit listen address) and nothing else. It prints its
// address and waits for SIGINT or SIGTERM.
package main
