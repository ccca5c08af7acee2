// Package deploytest holds what tests of application confinement share:
// a hostile application that tries, at every hook it has, to change the
// host outside its instance, and the host places it aims at. It is for
// tests only; nothing in the manager imports it.
package deploytest
