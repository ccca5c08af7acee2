package admincmd

import "sort"

// Spec describes one built-in command.
type Spec struct {
	Name    string // the command word, e.g. "remove-inferior"
	Args    string // usage synopsis of the arguments, e.g. "PEER|NAME"; "" when none
	Summary string // one line for the command list
	Help    string // a few lines for "help NAME"
	// Mutating commands change the manager; only admin peers may run them.
	Mutating bool
	// MinArgs and MaxArgs bound the number of arguments after the name;
	// MaxArgs -1 means no upper bound.
	MinArgs, MaxArgs int
}

// Usage returns the usage line: the name followed by the synopsis.
func (s *Spec) Usage() string {
	if s.Args == "" {
		return s.Name
	}
	return s.Name + " " + s.Args
}

// Builtins is the table of built-in commands, read-only ones first, in the
// order the command list shows them. Do not modify it.
var Builtins = []Spec{
	// Read-only.
	{
		Name: "help", Args: "[COMMAND]", MinArgs: 0, MaxArgs: 1,
		Summary: "list the commands, or explain one",
		Help: "With no argument, list every command this manager knows: the built-in\n" +
			"ones and the plugins. With a COMMAND, show its usage and what it does.",
	},
	{
		Name: "status", Args: "[EVENTS]", MinArgs: 0, MaxArgs: 1,
		Summary: "show this manager's identity and state",
		Help: "Show this manager's peer id, name and addresses, how long it has been\n" +
			"up, whether it is draining, its relations, and its most recent events:\n" +
			"the last 10, or the last EVENTS (0: all it keeps).",
	},
	{
		Name: "relations", MinArgs: 0, MaxArgs: 0,
		Summary: "list the superiors and inferiors, and their liveness",
		Help: "List this manager's superiors and inferiors: peer id, name, address,\n" +
			"whether the channel is up, and when the last heartbeat arrived.",
	},
	{
		Name: "tree", Args: "[DEPTH]", MinArgs: 0, MaxArgs: 1,
		Summary: "show the hierarchy below this manager",
		Help: "Show the managers below this one as a tree. DEPTH (a whole number)\n" +
			"limits how many levels down are shown. Managers that do not answer\n" +
			"in time are marked as missing.",
	},
	{
		Name: "resources", MinArgs: 0, MaxArgs: 0,
		Summary: "show this manager's resources and how much is free",
		Help: "Show the resources this manager owns (processors, memory, network,\n" +
			"attributes), how much of each is reserved, and how much is free.",
	},
	{
		Name: "reservations", Args: "[all|mine]", MinArgs: 0, MaxArgs: 1,
		Summary: "list the reservations held at this manager",
		Help: "List the reservations held at this manager (the live ones: held or\n" +
			"committed) with number, holder, resources and expiry, and per kind what\n" +
			"is reserved. 'all' adds those that ended lately; 'mine' lists only those\n" +
			"made by the peer asking.",
	},

	// Change the manager (admins only).
	{
		Name: "add-superior", Args: "MADDR", MinArgs: 1, MaxArgs: 1, Mutating: true,
		Summary: "ask MADDR to take this manager as its inferior",
		Help: "Dial MADDR (a full multiaddr ending in /p2p/<peer id>) and ask that\n" +
			"manager to take this manager as its inferior. Refused if it would\n" +
			"close a cycle. The new relation is saved.",
	},
	{
		Name: "remove-superior", Args: "PEER|NAME", MinArgs: 1, MaxArgs: 1, Mutating: true,
		Summary: "leave that superior",
		Help: "Leave that superior, named by peer id or by name. No failover is\n" +
			"started for it. The change is saved.",
	},
	{
		Name: "add-inferior", Args: "MADDR", MinArgs: 1, MaxArgs: 1, Mutating: true,
		Summary: "ask MADDR to take this manager as its superior",
		Help: "Dial MADDR (a full multiaddr ending in /p2p/<peer id>) and ask that\n" +
			"manager to take this manager as its superior. It must agree.",
	},
	{
		Name: "remove-inferior", Args: "PEER|NAME", MinArgs: 1, MaxArgs: 1, Mutating: true,
		Summary: "tell that inferior to leave",
		Help: "Tell that inferior, named by peer id or by name, to leave. It is told\n" +
			"not to come back, and looks for a new superior among this manager's\n" +
			"ancestors. The change is saved.",
	},
	{
		Name: "reparent", Args: "MADDR", MinArgs: 1, MaxArgs: 1, Mutating: true,
		Summary: "replace all superiors by MADDR",
		Help: "Dial MADDR (a full multiaddr ending in /p2p/<peer id>) and ask that\n" +
			"manager to take this one as its inferior; once it accepts, leave every\n" +
			"other superior. If it refuses, nothing changes.",
	},
	{
		Name: "set", Args: "KEY VALUE", MinArgs: 2, MaxArgs: 3, Mutating: true,
		Summary: "change a live setting, an attribute, or a user",
		Help: "Change a setting of the running manager, for example\n" +
			"'set heartbeat.interval 500ms'. The value is checked as in the\n" +
			"properties file; the reply gives the old value. The file is not\n" +
			"changed: a restart goes back to it.\n" +
			"'set attribute NAME VALUE' sets an attribute queries see (attrs.NAME):\n" +
			"VALUE is a number, true/false, \"text\", an array such as '[\"ssd\",\n" +
			"\"10g\"]', or plain text. It is saved in the data dir before the\n" +
			"answer and kept across restarts, over the properties file.\n" +
			"'set user NAME PEER_ID[,PEER_ID…]' maps client peers to a user of the\n" +
			"[users] table (request.user, user:NAME in access lists), saved and\n" +
			"kept the same way; with gridmgr admin --all it is the grid's users\n" +
			"file.",
	},
	{
		Name: "unset", Args: "attribute|user NAME", MinArgs: 2, MaxArgs: 2, Mutating: true,
		Summary: "remove an attribute or a user (kept across restarts)",
		Help: "'unset attribute NAME' removes the attribute, whether the properties\n" +
			"file or 'set attribute' gave it; saved like 'set attribute'.\n" +
			"'unset user NAME' removes the user from the [users] table (its peers\n" +
			"state their own names again); saved like 'set user'.",
	},
	{
		Name: "drain", MinArgs: 0, MaxArgs: 0, Mutating: true,
		Summary: "refuse new reservations, keep existing ones",
		Help: "Refuse new reservations; the existing ones stay until they are\n" +
			"released or lapse. A drained manager offers itself to no query (so\n" +
			"gridmgr reserve never tries it); finding it by name still works.\n" +
			"'undrain' takes new reservations again.",
	},
	{
		Name: "undrain", MinArgs: 0, MaxArgs: 0, Mutating: true,
		Summary: "take new reservations again",
		Help:    "Undo 'drain': take new reservations again.",
	},
	{
		Name: "shutdown", MinArgs: 0, MaxArgs: 0, Mutating: true,
		Summary: "stop this manager gracefully",
		Help: "Stop this manager gracefully: its inferiors are told, and reparent at\n" +
			"once instead of waiting for heartbeats to fail.",
	},
}

// Lookup returns the built-in command with that name.
func Lookup(name string) (*Spec, bool) {
	for i := range Builtins {
		if Builtins[i].Name == name {
			return &Builtins[i], true
		}
	}
	return nil, false
}

// Names returns the names of the built-in commands, sorted.
func Names() []string {
	names := make([]string, len(Builtins))
	for i := range Builtins {
		names[i] = Builtins[i].Name
	}
	sort.Strings(names)
	return names
}
