package plugin

// The texts below are agentkernel's own.

const claudeSkill = `---
name: agentkernel
description: Run commands in isolated agentkernel sandboxes instead of on the host. Use for running tests, builds, scripts, package installs and anything untrusted or destructive.
---

# Sandboxed execution with agentkernel

agentkernel runs a command in a throwaway sandbox: its own namespaces, a
copy-on-write view of the project, seccomp, dropped capabilities and a
network that reaches only what its policy allows (cloud metadata and the
host's own services only where the user's configuration names their
addresses). Nothing the command does reaches the host unless you copy it out.

## When to use the sandbox

Use ` + "`sandbox_run`" + ` instead of the host shell for:

- running tests, linters and builds (` + "`npm test`, `go test ./...`, `pytest`" + `);
- running code you just wrote, or code from the internet;
- installing packages to try something out;
- anything that deletes, rewrites or floods files, or could hang.

Keep the host shell for reading files and for git, where a sandbox adds
nothing.

## How

- ` + "`sandbox_run`" + ` with ` + "`command`" + ` as an array, e.g. ` + "`[\"sh\", \"-c\", \"npm ci && npm test\"]`" + `.
  The project directory is at ` + "`/workspace`" + ` (changes are thrown away
  under the default ` + "`moderate`" + ` profile). Pass ` + "`cwd`" + ` for a subdirectory (or a
  directory in ` + "`[mcp] allowed_dirs`" + ` of the server's agentkernel.toml),
  ` + "`env`" + ` as an object, ` + "`timeout_ms`" + ` for long jobs (default 30 s).
- The image is picked from the command (python3, node, go, cargo, …) or the
  project files; set ` + "`image`" + ` to choose (` + "`\"host\"`" + ` = the host's own tools,
  read-only).
- ` + "`profile`" + `: ` + "`restrictive`" + ` for untrusted code (no project, read-only root),
  ` + "`permissive`" + ` only when the command must change the project.
- For work spread over many calls (a dev server, an installed toolchain),
  ` + "`sandbox_create`" + ` a named sandbox, then ` + "`sandbox_exec`" + `,
  ` + "`sandbox_file_write`" + ` / ` + "`sandbox_file_read`" + `, and ` + "`sandbox_remove`" + ` when done.
- A non-zero exit comes back as an error result with the output: read it,
  fix, run again.
- The network is on (` + "`moderate`" + ` and ` + "`permissive`" + `), off (` + "`restrictive`" + `,
  or ` + "`network: false`" + `), or filtered to the agent's own list of hosts with
  ` + "`compatibility_mode`" + ` ` + "`claude`" + `, ` + "`codex`" + ` or ` + "`gemini`" + `: package installs
  (` + "`npm ci`, `pip install`, `go mod download`" + `) work unless it is off (in an
  agent mode, from the registries its list names). A refused name fails at once (NXDOMAIN or connection refused): the
  output's last line names it; ask the user before widening the policy.

## Suggested permissions (.claude/settings.json)

Allow without asking: ` + "`mcp__agentkernel__sandbox_run`, `mcp__agentkernel__sandbox_exec`, `mcp__agentkernel__sandbox_list`, `mcp__agentkernel__sandbox_file_read`" + `.
Ask first: ` + "`mcp__agentkernel__sandbox_create`, `mcp__agentkernel__sandbox_file_write`, `mcp__agentkernel__sandbox_remove`" + `.
`

const claudeCommand = `---
description: Run a command in an isolated agentkernel sandbox
argument-hint: <command> [args...]
allowed-tools: mcp__agentkernel__sandbox_run, Bash(agentkernel run:*)
---

Run this command in a fresh agentkernel sandbox, not on the host:

    $ARGUMENTS

Use the ` + "`sandbox_run`" + ` tool with the command split into an array (wrap it
as ` + "`[\"sh\", \"-c\", \"...\"]`" + ` when it uses pipes, redirections or ` + "`&&`" + `). If the MCP
tool is not available, run ` + "`agentkernel run -- <command>`" + ` instead. Show
the output; when it failed, explain why and suggest a fix.
`

const opencodePlugin = `// agentkernel plugin for OpenCode, written by 'agentkernel plugin install opencode'.
//
// Adds a sandbox_run tool that runs commands in an isolated agentkernel
// sandbox through agentkernel's HTTP API. Start the API with
// 'agentkernel serve'; AGENTKERNEL_BASE_URL (default http://127.0.0.1:18888)
// and AGENTKERNEL_API_KEY point the plugin at it.
import { tool, type Plugin } from "@opencode-ai/plugin"

const baseURL = (process.env.AGENTKERNEL_BASE_URL || "http://127.0.0.1:18888").replace(/\/+$/, "")

async function run(command: string[], opts: { image?: string; profile?: string; timeout_ms?: number; cwd?: string }): Promise<string> {
  const headers: Record<string, string> = { "Content-Type": "application/json" }
  if (process.env.AGENTKERNEL_API_KEY) headers["Authorization"] = "Bearer " + process.env.AGENTKERNEL_API_KEY
  let res: Response
  try {
    res = await fetch(baseURL + "/run", { method: "POST", headers, body: JSON.stringify({ command, ...opts }) })
  } catch (e) {
    throw new Error("agentkernel API not reachable at " + baseURL + " (start it with 'agentkernel serve'): " + e)
  }
  const body: any = await res.json().catch(() => ({}))
  if (!res.ok || body.success === false) {
    throw new Error("agentkernel: " + (body.error || res.status + " " + res.statusText))
  }
  const d = body.data ?? body
  if (typeof d === "string") return d
  return d.output ?? ((d.stdout ?? "") + (d.stderr ?? ""))
}

export const AgentkernelPlugin: Plugin = async ({ directory }) => {
  return {
    tool: {
      sandbox_run: tool({
        description:
          "Run a command in an isolated agentkernel sandbox (own namespaces, copy-on-write project at /workspace, policy-checked network) instead of on the host. Use it for tests, builds and untrusted code.",
        args: {
          command: tool.schema.array(tool.schema.string()).describe('the command and its arguments, e.g. ["sh","-c","npm test"]'),
          image: tool.schema.string().optional().describe("OCI image (default: detected)"),
          profile: tool.schema.enum(["permissive", "moderate", "restrictive"]).optional(),
          timeout_ms: tool.schema.number().optional(),
        },
        async execute(args) {
          return run(args.command, { image: args.image, profile: args.profile, timeout_ms: args.timeout_ms, cwd: directory })
        },
      }),
    },
  }
}
`
