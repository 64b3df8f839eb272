package detect

// DefaultImage is used when no rule matches (upstream agentkernel's
// default and its Shell row).
const DefaultImage = "alpine:3.20"

// Runtime is one row of the detection table: the commands and project
// files that select Image. Rows are scanned in table order and, within a
// row, patterns in listed order; the first match wins.
type Runtime struct {
	// Name is the row's human name ("Node.js", "Python", ...).
	Name string
	// Image is the image the row selects.
	Image string
	// Commands are exact basenames of argv[0] (and of a Procfile
	// command's first word) that select this row. Empty for rows that are
	// only chosen by project files (Kotlin).
	Commands []string
	// ProjectFiles are names looked up in the working directory. A
	// pattern "*suffix" matches any entry whose name ends with suffix (not
	// a glob, not recursive).
	ProjectFiles []string
	// Shell marks the Shell row: its commands are wrappers, so project
	// files and the Procfile are consulted before it (see the package
	// documentation).
	Shell bool
}

// Table returns the detection table in scan order. It is the upstream
// agentkernel 0.4 table (command and project-file detection share the
// row order). Each call returns a fresh copy that the caller may modify.
func Table() []Runtime {
	return []Runtime{
		{Name: "Node.js", Image: "node:22-alpine",
			Commands:     []string{"node", "npm", "npx", "yarn", "pnpm", "bun", "tsx", "ts-node"},
			ProjectFiles: []string{"package.json", "package-lock.json", "yarn.lock", "pnpm-lock.yaml", "bun.lockb"}},
		{Name: "Rust", Image: "rust:1.85-alpine",
			Commands:     []string{"cargo", "rustc", "rustup", "rustfmt", "clippy"},
			ProjectFiles: []string{"Cargo.toml", "Cargo.lock"}},
		{Name: "Go", Image: "golang:1.23-alpine",
			Commands:     []string{"go", "gofmt"},
			ProjectFiles: []string{"go.mod", "go.sum"}},
		{Name: "Python", Image: "python:3.12-alpine",
			Commands:     []string{"python", "python3", "pip", "pip3", "poetry", "uv", "pytest", "ruff"},
			ProjectFiles: []string{"pyproject.toml", "requirements.txt", "setup.py", "setup.cfg", "Pipfile", "poetry.lock", "uv.lock"}},
		{Name: "Ruby", Image: "ruby:3.3-alpine",
			Commands:     []string{"ruby", "gem", "bundle", "bundler", "rake", "rails"},
			ProjectFiles: []string{"Gemfile", "Gemfile.lock", "*.gemspec"}},
		{Name: "Java", Image: "eclipse-temurin:21-alpine",
			Commands:     []string{"java", "javac", "mvn", "gradle", "gradlew"},
			ProjectFiles: []string{"pom.xml", "build.gradle", "build.gradle.kts", "settings.gradle"}},
		{Name: "Kotlin", Image: "eclipse-temurin:21-alpine",
			ProjectFiles: []string{"*.kt"}},
		{Name: ".NET", Image: "mcr.microsoft.com/dotnet/sdk:8.0",
			Commands:     []string{"dotnet", "csc", "fsc"},
			ProjectFiles: []string{"*.csproj", "*.fsproj", "*.sln", "global.json"}},
		{Name: "C/C++", Image: "gcc:14-bookworm",
			Commands:     []string{"gcc", "g++", "clang", "clang++", "make", "cmake", "cc"},
			ProjectFiles: []string{"Makefile", "CMakeLists.txt", "configure", "*.c", "*.cpp", "*.h"}},
		{Name: "PHP", Image: "php:8.3-alpine",
			Commands:     []string{"php", "composer"},
			ProjectFiles: []string{"composer.json", "composer.lock", "*.php"}},
		{Name: "Elixir", Image: "elixir:1.16-alpine",
			Commands:     []string{"elixir", "mix", "iex"},
			ProjectFiles: []string{"mix.exs", "mix.lock"}},
		{Name: "Shell", Image: DefaultImage, Shell: true,
			Commands:     []string{"sh", "bash", "zsh", "ash"},
			ProjectFiles: []string{"*.sh"}},
		{Name: "Lua", Image: "nickblah/lua:5.4-alpine",
			Commands:     []string{"lua", "luajit", "luarocks"},
			ProjectFiles: []string{"*.lua", ".luacheckrc"}},
		{Name: "Terraform", Image: "hashicorp/terraform:1.10",
			Commands:     []string{"terraform"},
			ProjectFiles: []string{"*.tf", "*.tfvars", "terraform.tfstate"}},
	}
}

// Shorthand is one [sandbox].runtime value and the image it stands for.
type Shorthand struct {
	Name  string // the [sandbox].runtime value
	Image string // the image it selects
}

// Shorthands returns the [sandbox].runtime table (upstream 0.4), "base"
// last. Each call returns a fresh copy.
func Shorthands() []Shorthand {
	return []Shorthand{
		{"python", "python:3.12-alpine"},
		{"node", "node:22-alpine"},
		{"go", "golang:1.23-alpine"},
		{"rust", "rust:1.85-alpine"},
		{"ruby", "ruby:3.3-alpine"},
		{"java", "eclipse-temurin:21-alpine"},
		{"c", "gcc:14-bookworm"},
		{"dotnet", "mcr.microsoft.com/dotnet/sdk:8.0"},
		{"base", DefaultImage},
	}
}

// RuntimeImage returns the image for a [sandbox].runtime shorthand and
// whether the name is known. Upstream mapped unknown names to alpine:3.20
// silently; agentkernel rejects them in config validation instead.
func RuntimeImage(name string) (string, bool) {
	for _, s := range Shorthands() {
		if s.Name == name {
			return s.Image, true
		}
	}
	return "", false
}

// RuntimeNames lists the valid [sandbox].runtime values in table order.
func RuntimeNames() []string {
	var out []string
	for _, s := range Shorthands() {
		out = append(out, s.Name)
	}
	return out
}
