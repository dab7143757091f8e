// Real agent clients from their npm packages (exact versions in tests/node/package.json) against
// `k3 serve --test-script` on a synthetic model: OpenAI's Codex CLI (`codex exec`, Responses API),
// Anthropic's Claude Code (`claude -p`, Messages API) and Qwen Code (`qwen -p`, chat completions),
// each through a tool call that the client runs (a shell command whose output goes back as the
// tool result) and a scripted final answer. Codex sends its whole default request (~26k tokens of
// the synthetic model's small vocabulary); Claude Code (~34k by default) gets a short system prompt
// and only its Bash tool by its own flags, Qwen Code a short system prompt and only its shell tool,
// to keep the prefill short on the 2-core machine. Each client runs in a temporary home with its documented settings
// for a custom endpoint, a key that is not a real provider's, and telemetry and update checks off
// (the network is closed anyway; nothing may hang on it). Checked: the exit status, the final text,
// the tool's output as the client saw it, and that the second request of a session had at least
// 90 % of the first one's prompt from the prompt cache, as the client itself reports it. A failing
// client's stdout and stderr are printed with the server's log.
//
//   node tests/server/e2e_clients.mjs [--k3 build/bin/k3] [--only codex|claude|qwen]
import { spawn } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import * as L from "./lib.mjs";

const { assert, eq } = L;
const opt = L.args();
const test = (name, fn) => (!opt.only || name.toLowerCase().startsWith(opt.only)) && L.test(name, fn);
const dir = L.tmpdir();
const modelPath = L.makeTinyModel(opt.k3, dir);
const KEY = "k3-test-key-not-a-provider-key";
const bin = (rel) => path.join(L.root, "tests/node/node_modules", rel);
const CLIENT_TIMEOUT_MS = 600000;  // generous: the synthetic model prefills 5-26k-token agent prompts on a busy machine

// Runs a client to its end (or kills it at the timeout), then whatever it left running in its
// process group (clients relaunch themselves in child processes); resolves {code, stdout, stderr}.
function runClient(cmd, args, { cwd, env }) {
  return new Promise((resolve) => {
    const p = spawn(cmd, args, { cwd, env, stdio: ["ignore", "pipe", "pipe"], detached: true });
    let stdout = "", stderr = "";
    p.stdout.on("data", (d) => (stdout += d));
    p.stderr.on("data", (d) => (stderr += d));
    const killGroup = () => {
      try {
        process.kill(-p.pid, "SIGKILL");
      } catch {}  // the group is gone
    };
    const t = setTimeout(killGroup, CLIENT_TIMEOUT_MS);
    p.on("close", (code, signal) => {
      clearTimeout(t);
      killGroup();
      resolve({ code: code ?? signal, stdout, stderr });
    });
  });
}

// A server with its own script, a client session in a fresh home; on a failed check the client's
// output and the server's log are printed.
async function session(name, script, fn) {
  const home = fs.mkdtempSync(path.join(dir, name + "-home-"));
  const work = fs.mkdtempSync(path.join(dir, name + "-work-"));
  const scriptFile = path.join(home, "script.json");
  fs.writeFileSync(scriptFile, JSON.stringify(script));
  const srv = await L.startServer(opt.k3, modelPath, ["-t", "2", "-c", "65536", "--alias", "k3", "--api-key", KEY, "--test-script", scriptFile]);
  let out = null;
  const env = { PATH: process.env.PATH, HOME: home, LANG: "C.UTF-8", TERM: "dumb", NO_COLOR: "1" };
  try {
    await fn({ srv, home, work, env, run: async (cmd, args, extraEnv) => (out = await runClient(cmd, args, { cwd: work, env: { ...env, ...extraEnv } })) });
  } catch (e) {
    if (out) console.log(`---- ${name} exit ${out.code}\n---- stdout:\n${out.stdout}\n---- stderr:\n${out.stderr}`);
    console.log(`---- k3 serve log:\n${srv.log()}`);
    throw e;
  } finally {
    await srv.stop();
  }
}

const SYSTEM = "You are a coding agent under test. Use your tools when asked to run a command.";
const jsonLines = (text) => text.split("\n").filter((l) => l.startsWith("{")).map((l) => JSON.parse(l));

// ---- Codex CLI: Responses API (function tools, a namespace tool, web_search, client_metadata,
// prompt_cache_key, include: reasoning.encrypted_content) ----
const CODEX_ANSWER = "The command printed k3-codex-42.";
test("Codex CLI: exec_command runs, its output comes back, the scripted answer ends the turn", async () => {
  const script = [
    { reasoning: "I will run the command.", tool_calls: [{ name: "exec_command", arguments: { cmd: "echo k3-codex-$((6*7))" } }] },
    { reasoning: "It printed the marker.", content: CODEX_ANSWER },
  ];
  await session("codex", script, async ({ srv, home, env, run }) => {
    const codexHome = path.join(home, ".codex");
    fs.mkdirSync(codexHome);
    fs.writeFileSync(path.join(codexHome, "config.toml"), [
      'model = "k3"',
      'model_provider = "k3"',
      "check_for_update_on_startup = false",
      "[analytics]",
      "enabled = false",
      "[model_providers.k3]",
      'name = "k3"',
      `base_url = "${srv.url}/v1"`,
      'wire_api = "responses"',
      'env_key = "K3_API_KEY"',
      "request_max_retries = 0",
      "stream_max_retries = 0",
      "",
    ].join("\n"));
    const r = await run(bin(".bin/codex"), ["exec", "--json", "--skip-git-repo-check", "Run echo k3-codex-$((6*7)) and tell me what it printed."],
      { CODEX_HOME: codexHome, K3_API_KEY: KEY });
    eq(r.code, 0, "codex exit status");
    const events = jsonLines(r.stdout);
    const cmd = events.find((e) => e.type === "item.completed" && e.item.type === "command_execution");
    assert(cmd, "codex ran no command");
    assert(cmd.item.aggregated_output.includes("k3-codex-42"), "the command's output: " + JSON.stringify(cmd.item));
    eq(cmd.item.exit_code, 0, "the command's exit code");
    const answer = events.filter((e) => e.type === "item.completed" && e.item.type === "agent_message").pop();
    eq(answer && answer.item.text, CODEX_ANSWER, "codex's final message");
    // Per request, from the session's rollout file: token_count events with the last request's usage.
    const rollout = fs.readdirSync(path.join(codexHome, "sessions"), { recursive: true }).find((f) => f.endsWith(".jsonl"));
    const usage = jsonLines(fs.readFileSync(path.join(codexHome, "sessions", rollout), "utf8"))
      .filter((l) => l.type === "event_msg" && l.payload.type === "token_count" && l.payload.info)
      .map((l) => l.payload.info.last_token_usage);
    assert(usage.length >= 2, "token counts of two requests: " + JSON.stringify(usage));
    eq(usage[0].cached_input_tokens, 0, "request 1 cached tokens");
    assert(usage[1].cached_input_tokens >= 0.9 * usage[0].input_tokens,
      `request 2 cached ${usage[1].cached_input_tokens} of request 1's ${usage[0].input_tokens} prompt tokens`);
    console.log(`     codex: request 1 prompt ${usage[0].input_tokens}, request 2 prompt ${usage[1].input_tokens} of which cached ${usage[1].cached_input_tokens}`);
  });
});

// ---- Claude Code: Messages API (mid-conversation system messages, per-turn output_config,
// adaptive thinking, cache_control, beta headers, metadata) ----
const CLAUDE_ANSWER = "The command printed k3-claude-42.";
test("Claude Code: Bash runs, its tool_result comes back, the scripted answer ends the session", async () => {
  const script = [
    { reasoning: "I will run the command.", tool_calls: [{ name: "Bash", arguments: { command: "echo k3-claude-$((6*7))", description: "Print the marker" } }] },
    { reasoning: "It printed the marker.", content: CLAUDE_ANSWER },
  ];
  await session("claude", script, async ({ srv, run }) => {
    // Its own system prompt and only the Bash tool keep the prompt at a few thousand tokens (the
    // default ones are ~34k tokens of the synthetic model's small vocabulary: minutes of prefill).
    const r = await run(bin(".bin/claude"), ["-p", "Run echo k3-claude-$((6*7)) and tell me what it printed.", "--output-format", "stream-json",
      "--verbose", "--tools", "Bash", "--allowedTools", "Bash", "--system-prompt", SYSTEM, "--max-turns", "4"], {
      ANTHROPIC_BASE_URL: srv.url,
      ANTHROPIC_API_KEY: KEY,
      CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1",
      DISABLE_AUTOUPDATER: "1",
      DISABLE_TELEMETRY: "1",
      DISABLE_ERROR_REPORTING: "1",
    });
    eq(r.code, 0, "claude exit status");
    const events = jsonLines(r.stdout);
    const results = events.filter((e) => e.type === "user").flatMap((e) => e.message.content).filter((c) => c.type === "tool_result");
    assert(results.length === 1, "one tool_result: " + JSON.stringify(results));
    const text = typeof results[0].content === "string" ? results[0].content : results[0].content.map((c) => c.text).join("");
    assert(text.includes("k3-claude-42") && !results[0].is_error, "the Bash tool_result: " + JSON.stringify(results[0]));
    const final = events.find((e) => e.type === "result");
    assert(final && !final.is_error && final.subtype === "success", "the result event: " + JSON.stringify(final));
    eq(final.result, CLAUDE_ANSWER, "claude's final text");
    // Each API response's usage, as Claude Code reports it on its assistant messages.
    const usage = [];
    for (const e of events.filter((e) => e.type === "assistant"))
      if (!usage.some((u) => u.id === e.message.id)) usage.push({ id: e.message.id, ...e.message.usage });
    assert(usage.length >= 2, "usage of two responses: " + JSON.stringify(usage));
    const prompt1 = usage[0].input_tokens + usage[0].cache_read_input_tokens;
    eq(usage[0].cache_read_input_tokens, 0, "response 1 cache_read_input_tokens");
    assert(usage[1].cache_read_input_tokens >= 0.9 * prompt1, `response 2 read ${usage[1].cache_read_input_tokens} of response 1's ${prompt1} prompt tokens from the cache`);
    console.log(`     claude: request 1 prompt ${prompt1}, request 2 prompt ${usage[1].input_tokens + usage[1].cache_read_input_tokens} of which cached ${usage[1].cache_read_input_tokens}`);
  });
});

// ---- Qwen Code: chat completions (streaming with usage, tools, a 32k max_tokens) ----
const QWEN_ANSWER = "The command printed k3-qwen-42.";
// Qwen Code 0.24.4 now and then reports the output of a command that prints and exits at once as
// "(empty)"; one that prints after a moment is reported whole.
const QWEN_COMMAND = "sleep 0.5; echo k3-qwen-$((6*7))";
// Its tools other than run_shell_command, left out to keep the prompt short (~8k tokens, not ~25k).
const QWEN_OTHER_TOOLS = ["agent", "skill", "tool_search", "tool_call", "get_goal", "update_goal", "list_agents", "glob", "grep_search",
  "read_file", "cron_create", "cron_delete", "cron_list", "edit", "enter_worktree", "exit_worktree", "loop_wakeup", "monitor",
  "notebook_edit", "read_mcp_resource", "record_artifact", "report_findings", "send_message", "task_stop", "web_fetch", "write_file"];
test("Qwen Code: run_shell_command runs, its result comes back, the scripted answer ends the turn", async () => {
  const script = [
    { reasoning: "I will run the command.", tool_calls: [{ name: "run_shell_command", arguments: { command: QWEN_COMMAND,
      is_background: false, description: "Print the marker" } }] },
    { reasoning: "It printed the marker.", content: QWEN_ANSWER },
  ];
  await session("qwen", script, async ({ srv, home, run }) => {
    fs.mkdirSync(path.join(home, ".qwen"));
    fs.writeFileSync(path.join(home, ".qwen/settings.json"), JSON.stringify({
      privacy: { usageStatisticsEnabled: false },
      telemetry: { enabled: false },
      general: { enableAutoUpdate: false },
      // After a turn it asks the model to update its memory files: a request beyond the script.
      memory: { enableManagedAutoMemory: false, enableManagedAutoDream: false },
    }));
    const r = await run(bin(".bin/qwen"), ["-p", `Run ${QWEN_COMMAND} and tell me what it printed.`, "--auth-type", "openai",
      "--output-format", "json", "--system-prompt", SYSTEM, "--core-tools", "run_shell_command", "--exclude-tools", ...QWEN_OTHER_TOOLS,
      "--approval-mode", "yolo"],
      { OPENAI_BASE_URL: srv.url + "/v1", OPENAI_API_KEY: KEY, OPENAI_MODEL: "k3" });
    eq(r.code, 0, "qwen exit status");
    const events = JSON.parse(r.stdout.slice(r.stdout.indexOf("[")));
    const results = events.filter((e) => e.type === "user").flatMap((e) => e.message.content).filter((c) => c.type === "tool_result");
    assert(results.length === 1, "one tool result: " + JSON.stringify(results));
    const text = typeof results[0].content === "string" ? results[0].content : JSON.stringify(results[0].content);
    assert(text.includes("k3-qwen-42") && !results[0].is_error, "the run_shell_command result: " + JSON.stringify(results[0]));
    const final = events.find((e) => e.type === "result");
    assert(final && !final.is_error, "the result: " + JSON.stringify(final));
    eq(final.result, QWEN_ANSWER, "qwen's final text");
    // Each response's usage (prompt_tokens and cached_tokens, as it reports them).
    const usage = events.filter((e) => e.type === "assistant" && e.message.usage?.input_tokens > 0).map((e) => e.message.usage);
    assert(usage.length >= 2, "usage of two responses: " + JSON.stringify(usage));
    eq(usage[0].cache_read_input_tokens ?? 0, 0, "response 1 cached tokens");
    assert(usage[1].cache_read_input_tokens >= 0.9 * usage[0].input_tokens,
      `response 2 cached ${usage[1].cache_read_input_tokens} of response 1's ${usage[0].input_tokens} prompt tokens`);
    console.log(`     qwen: request 1 prompt ${usage[0].input_tokens}, request 2 prompt ${usage[1].input_tokens} of which cached ${usage[1].cache_read_input_tokens}`);
  });
});

await L.run("e2e_clients", () => fs.rmSync(dir, { recursive: true, force: true }));
