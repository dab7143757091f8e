// Images through the real `k3 serve --mmproj` and the official `openai` client: a chat with an image
// data URL (PNG and JPEG) answers and counts the image rows in usage.prompt_tokens (streaming too);
// broken base64, a corrupt image, a remote URL, too many pixels, an unsupported type and an image
// without a vision model are 400s that say what is wrong and name the part; the server keeps serving.
// The same image through the Anthropic Messages API (@anthropic-ai/sdk, a base64 image block) and
// the OpenAI Responses API (input_image) gives the same prompt and the same greedy answer.
//   node tests/server/e2e_vision.mjs --k3 build/bin/k3
import { execFileSync } from "node:child_process";
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";
import { args, tmpdir, startServer, client, postJson, test, run, assert, eq, root, png } from "./lib.mjs";

const Anthropic = (await import(createRequire(path.join(root, "tests/node/package.json")).resolve("@anthropic-ai/sdk"))).default;

const a = args();
const dir = tmpdir();
const model = path.join(dir, "tiny.gguf");
execFileSync(a.k3, ["make-tiny", "-q", "--out", model, "--vision"], { stdio: "inherit" });
const mmproj = path.join(dir, "mmproj-tiny.gguf");

const PNG = png(100, 60);
const pngFile = path.join(dir, "img.png");
fs.writeFileSync(pngFile, PNG);
const JPEG_B64 = "/9j/4AAQSkZJRgABAQAAAQABAAD/2wBDAAYEBQYFBAYGBQYHBwYIChAKCgkJChQODwwQFxQYGBcUFhYaHSUfGhsjHBYWICwgIyYnKSopGR8tMC0oMCUoKSj/2wBDAQcHBwoIChMKChMoGhYaKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCj/wAARCAAYACADASIAAhEBAxEB/8QAHwAAAQUBAQEBAQEAAAAAAAAAAAECAwQFBgcICQoL/8QAtRAAAgEDAwIEAwUFBAQAAAF9AQIDAAQRBRIhMUEGE1FhByJxFDKBkaEII0KxwRVS0fAkM2JyggkKFhcYGRolJicoKSo0NTY3ODk6Q0RFRkdISUpTVFVWV1hZWmNkZWZnaGlqc3R1dnd4eXqDhIWGh4iJipKTlJWWl5iZmqKjpKWmp6ipqrKztLW2t7i5usLDxMXGx8jJytLT1NXW19jZ2uHi4+Tl5ufo6erx8vP09fb3+Pn6/8QAHwEAAwEBAQEBAQEBAQAAAAAAAAECAwQFBgcICQoL/8QAtREAAgECBAQDBAcFBAQAAQJ3AAECAxEEBSExBhJBUQdhcRMiMoEIFEKRobHBCSMzUvAVYnLRChYkNOEl8RcYGRomJygpKjU2Nzg5OkNERUZHSElKU1RVVldYWVpjZGVmZ2hpanN0dXZ3eHl6goOEhYaHiImKkpOUlZaXmJmaoqOkpaanqKmqsrO0tba3uLm6wsPExcbHyMnK0tPU1dbX2Nna4uPk5ebn6Onq8vP09fb3+Pn6/9oADAMBAAIRAxEAPwDntNn6c11Omz9Oa4DTZ+nNdTps/Tmvrc6xO54VPJfI7/TZ+nNa2o6XY+IdKk0/U4/MhfkMOGjbsynsR/iDkEiuU02fpzXU6dP05r8mzfGSpy54OzR6WHymVKanDRrZnzdps/Tmup02fpzRRX3+dTep93TwtPsdTp0/Tmujg1CO1g82ZsKO3cn0FFFfm6w0cdmFHC1W+WcknbezZOZ2weBq4mmvejFtX2ukf//Z";  // 32 x 24, written by Pillow
const jpegFile = path.join(dir, "img.jpg");
fs.writeFileSync(jpegFile, Buffer.from(JPEG_B64, "base64"));
const rowsOf = (file) =>
  JSON.parse(execFileSync(a.k3, ["encode-image", "--mmproj", mmproj, "--image", file, "-t", "1"]).toString()).n_tokens;

const server = await startServer(a.k3, model, ["--mmproj", mmproj, "-P", "2", "--image-max-pixels", "20000"]);
const plain = await startServer(a.k3, model);
const oa = client(server);
const url = (mime, b64) => `data:${mime};base64,${b64}`;
const withImage = (u, text = "What is in the picture?") => [
  { role: "user", content: [{ type: "text", text }, { type: "image_url", image_url: { url: u } }] },
];
const tokens = async (text) => (await postJson(server, "/tokenize", { content: text })).body.tokens.length;

// prompt_tokens of a message with an image = that of the text alone + the image prompt's tokens,
// with its one <|media_pad|> replaced by the image's rows.
async function expectedPrompt(rows, w, h, text) {
  const base = await oa.chat.completions.create({ messages: [{ role: "user", content: text }], max_tokens: 1, temperature: 0 });
  const imagePrompt = `<|media_begin|>image ${w}x${h}<|media_content|><|media_pad|><|media_end|>`;
  return base.usage.prompt_tokens + (await tokens(imagePrompt)) - 1 + rows;
}

test("a PNG data URL: an answer, and the image rows in usage", async () => {
  const rows = rowsOf(pngFile);
  assert(rows > 1, "the image has several rows");
  const r = await oa.chat.completions.create({ messages: withImage(url("image/png", PNG.toString("base64"))), max_tokens: 6, temperature: 0 });
  assert(r.choices[0].message.role === "assistant" && r.usage.completion_tokens >= 1, "an answer");
  eq(r.usage.prompt_tokens, await expectedPrompt(rows, 100, 60, "What is in the picture?"), "prompt_tokens counts the rows");
});

test("a JPEG data URL, streamed with include_usage", async () => {
  const rows = rowsOf(jpegFile);
  const stream = await oa.chat.completions.create({
    messages: withImage(url("image/jpeg", JPEG_B64), "Describe."), max_tokens: 5, temperature: 0, stream: true,
    stream_options: { include_usage: true },
  });
  let usage = null, chunks = 0;
  for await (const ch of stream) {
    chunks++;
    if (ch.usage) usage = ch.usage;
  }
  assert(chunks > 1 && usage, "chunks and a usage chunk");
  eq(usage.prompt_tokens, await expectedPrompt(rows, 32, 24, "Describe."), "prompt_tokens counts the rows");
});

test("two images in one message, and greedy answers that do not depend on the batch", async () => {
  const msgs = [{ role: "user", content: [
    { type: "image_url", image_url: { url: url("image/png", PNG.toString("base64")), detail: "auto" } },
    { type: "text", text: "and" },
    { type: "image_url", image_url: { url: url("image/jpeg", JPEG_B64) } },
  ] }];
  const one = await oa.chat.completions.create({ messages: msgs, max_tokens: 8, temperature: 0 });
  const [x, y] = await Promise.all([0, 1].map(() => oa.chat.completions.create({ messages: msgs, max_tokens: 8, temperature: 0 })));
  eq(x.choices[0].message.content, one.choices[0].message.content, "same answer in a batch of two");
  eq(y.choices[0].message.content, one.choices[0].message.content, "same answer in a batch of two");
});

test("the same image through /v1/messages and /v1/responses: same prompt, same greedy answer", async () => {
  const b64 = PNG.toString("base64"), text = "What is in the picture?";
  const chat = await oa.chat.completions.create({ messages: withImage(url("image/png", b64), text), max_tokens: 6, temperature: 0 });
  const claude = new Anthropic({ apiKey: "unused", baseURL: server.url, maxRetries: 0 });
  const m = await claude.messages.create({
    model: "k3", max_tokens: 6, temperature: 0, thinking: { type: "adaptive" },
    messages: [{ role: "user", content: [{ type: "text", text }, { type: "image", source: { type: "base64", media_type: "image/png", data: b64 } }] }],
  });
  // The same prompt again: the prompt cache serves it (the image's rows are keyed by their hash).
  eq(m.usage.input_tokens + m.usage.cache_read_input_tokens, chat.usage.prompt_tokens, "Anthropic input + cache_read tokens = chat prompt_tokens");
  eq(m.usage.cache_read_input_tokens, chat.usage.prompt_tokens, "the same image and text restored whole");
  const r = await oa.responses.create({
    model: "k3", max_output_tokens: 6, temperature: 0,
    input: [{ role: "user", content: [{ type: "input_text", text }, { type: "input_image", image_url: url("image/png", b64) }] }],
  });
  eq(r.usage.input_tokens, chat.usage.prompt_tokens, "Responses input_tokens = chat prompt_tokens");
  const answer = chat.choices[0].message.content ?? "";
  const mText = m.content.filter((b) => b.type === "text").map((b) => b.text).join("");
  eq(mText, answer, "the same answer through /v1/messages");
  eq(r.output_text, answer, "the same answer through /v1/responses");
  let err = null;
  try {
    await claude.messages.create({ model: "k3", max_tokens: 2, messages: [{ role: "user", content: [
      { type: "image", source: { type: "url", url: "https://example.com/cat.png" } }] }] });
  } catch (e) {
    err = e;
  }
  assert(err && err.status === 400 && err.error?.error?.message.includes("remote image URLs are not supported"),
         `a remote Anthropic image is a 400 (${err?.status} ${err?.error?.error?.message})`);
  assert(err.error.error.message.includes("messages[0].content[0]"), "it names the block: " + err.error.error.message);
});

test("a different image with the same text is not served from the cache", async () => {
  const text = "Which picture is this?", rows = rowsOf(pngFile);
  const a = await oa.chat.completions.create({ messages: withImage(url("image/png", PNG.toString("base64")), text), max_tokens: 2, temperature: 0 });
  const again = await oa.chat.completions.create({ messages: withImage(url("image/png", PNG.toString("base64")), text), max_tokens: 2, temperature: 0 });
  eq(again.usage.prompt_tokens_details.cached_tokens, a.usage.prompt_tokens, "the same image and text: all cached");
  const other = png(100, 60, 97);  // same size, so the same tokens and as many rows, other pixels
  const b = await oa.chat.completions.create({ messages: withImage(url("image/png", other.toString("base64")), text), max_tokens: 2, temperature: 0 });
  eq(b.usage.prompt_tokens, a.usage.prompt_tokens, "the same prompt length");
  assert(b.usage.prompt_tokens_details.cached_tokens <= b.usage.prompt_tokens - rows,
         `the other image's rows were computed, not restored (${b.usage.prompt_tokens_details.cached_tokens} of ${b.usage.prompt_tokens} cached, ${rows} rows)`);
});

async function expect400(messages, param, ...parts) {
  let err = null;
  try {
    await oa.chat.completions.create({ messages, max_tokens: 2 });
  } catch (e) {
    err = e;
  }
  assert(err && err.status === 400, `a 400 (got ${err ? err.status : "success"})`);
  const msg = err.error?.message ?? err.message;
  for (const p of parts) assert(msg.includes(p), `the message '${msg}' says '${p}'`);
  if (param) eq(err.error?.param, param, "the error names the part");
}

test("broken base64 is a 400", () =>
  expect400(withImage("data:image/png;base64,iVBORw0K!!!GgoAAAANSUhEUg"), "messages[0].content[1]", "broken base64", "messages[0].content[1]"));
test("a corrupt image is a 400", () =>
  expect400(withImage(url("image/png", PNG.subarray(0, 60).toString("base64"))), "messages[0].content[1]", "PNG"));
test("a remote URL is a 400 that says the server fetches nothing", () =>
  expect400(withImage("https://example.com/cat.png"), "messages[0].content[1]", "remote image URLs are not supported"));
test("too many pixels is a 400", () =>
  expect400(withImage(url("image/png", png(200, 150).toString("base64"))), "messages[0].content[1]", "30000 pixels, more than the limit of 20000"));
test("an unsupported media type is a 400", () =>
  expect400(withImage("data:image/gif;base64,R0lGODlhAQABAAAAACw="), "messages[0].content[1]", "image/gif"));
test("an image in an assistant message is a 400", () =>
  expect400([{ role: "user", content: "hi" }, { role: "assistant", content: [{ type: "image_url", image_url: { url: "data:image/png;base64,AA==" } }] },
             { role: "user", content: "?" }], null, "only allowed in user messages"));
test("an image without --mmproj is a 400", async () => {
  const r = await postJson(plain, "/v1/chat/completions", { messages: withImage(url("image/png", PNG.toString("base64"))), max_tokens: 2 });
  eq(r.status, 400, "status");
  assert(r.body.error.message.includes("no vision model"), r.body.error.message);
});
test("the server keeps serving", async () => {
  const r = await oa.chat.completions.create({ messages: withImage(url("image/png", PNG.toString("base64"))), max_tokens: 3 });
  assert(r.usage.completion_tokens >= 1, "an answer after the errors");
  assert(server.alive() && plain.alive(), "both servers alive");
});

await run("server vision", async () => {
  await server.stop();
  await plain.stop();
  fs.rmSync(dir, { recursive: true, force: true });
});
