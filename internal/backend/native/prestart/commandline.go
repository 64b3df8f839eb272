package prestart

// IsRun reports whether args (argv, program name first) is
// agentkernel [global flags] run …: its first argument that is neither a
// flag nor a global flag's value is "run".
func IsRun(args []string) bool {
	for i := 1; i < len(args); i++ {
		switch a := args[i]; a {
		case "-c", "--config", "--data-dir", "--log-level":
			i++ // its value is the next argument
		case "run":
			return true
		default:
			if len(a) < 2 || a[0] != '-' || a == "--" {
				return false
			}
		}
	}
	return false
}
