#!/usr/bin/env node
// Reference data for the tokenizer parity tests, from js-tiktoken (tests/node/node_modules).
//   node refs.mjs export OUTDIR              cl100k_base.tiktoken, o200k_base.tiktoken (+ .specials.json)
//   node refs.mjs strings CORPUS OUT.json    the corpus as a JSON array of strings (bytes that are
//                                            not UTF-8 decoded with replacement, as JavaScript does)
//   node refs.mjs tiktoken CORPUS OUTDIR     tiktoken_<enc>.json = {"plain": [[ids]], "special": [[ids]]}
//   node refs.mjs bench-text BYTES OUT.txt   a deterministic mixed text of about BYTES bytes
//                                            built from the corpus (for the throughput benchmark)
import fs from "node:fs";
import path from "node:path";

const nm = new URL("../node/node_modules/js-tiktoken/dist/", import.meta.url);
const ENCODINGS = ["cl100k_base", "o200k_base"];

async function ranksOf(enc) {
    return (await import(new URL(`ranks/${enc}.js`, nm))).default;
}

// js-tiktoken's compressed rank format: lines "<prefix> <first rank> <base64>..." (see its
// Tiktoken constructor); returns [base64, rank] pairs.
function expand(bpeRanks) {
    const out = [];
    for (const line of bpeRanks.split("\n")) {
        if (!line) continue;
        const [, offsetStr, ...tokens] = line.split(" ");
        const offset = Number.parseInt(offsetStr, 10);
        tokens.forEach((t, i) => out.push([t, offset + i]));
    }
    return out;
}

function corpusStrings(corpusPath) {
    const dec = new TextDecoder("utf-8");
    return JSON.parse(fs.readFileSync(corpusPath, "utf8")).map((e) => (e.text !== undefined ? e.text : dec.decode(Buffer.from(e.b64, "base64"))));
}

const [cmd, ...args] = process.argv.slice(2);
if (cmd === "export") {
    const dir = args[0];
    fs.mkdirSync(dir, { recursive: true });
    for (const enc of ENCODINGS) {
        const r = await ranksOf(enc);
        const pairs = expand(r.bpe_ranks).sort((a, b) => a[1] - b[1]);
        fs.writeFileSync(path.join(dir, `${enc}.tiktoken`), pairs.map(([t, k]) => `${t} ${k}\n`).join(""));
        fs.writeFileSync(path.join(dir, `${enc}.specials.json`), JSON.stringify(r.special_tokens));
        console.error(`${enc}: ${pairs.length} ranks, ${Object.keys(r.special_tokens).length} specials`);
    }
} else if (cmd === "strings") {
    fs.writeFileSync(args[1], JSON.stringify(corpusStrings(args[0])));
} else if (cmd === "tiktoken") {
    const { Tiktoken } = await import(new URL("lite.js", nm));
    const strings = corpusStrings(args[0]);
    fs.mkdirSync(args[1], { recursive: true });
    for (const enc of ENCODINGS) {
        const t0 = performance.now();
        const tk = new Tiktoken(await ranksOf(enc));
        const plain = strings.map((s) => tk.encode(s, [], []));
        const special = strings.map((s) => tk.encode(s, "all"));
        fs.writeFileSync(path.join(args[1], `tiktoken_${enc}.json`), JSON.stringify({ plain, special }));
        console.error(`${enc}: ${strings.length} strings in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
    }
} else if (cmd === "bench-text") {
    const want = Number(args[0]);
    const strings = JSON.parse(fs.readFileSync(new URL("corpus.json", import.meta.url), "utf8"))
        .filter((e) => e.text !== undefined && e.cat !== "special" && e.cat !== "long").map((e) => e.text);
    let seed = 12345;
    const parts = [];
    let n = 0;
    while (n < want) {
        seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
        const s = strings[seed % strings.length] + "\n";
        parts.push(s);
        n += Buffer.byteLength(s);
    }
    fs.writeFileSync(args[1], parts.join(""));
} else {
    console.error("usage: node refs.mjs export OUTDIR | strings CORPUS OUT | tiktoken CORPUS OUTDIR | bench-text BYTES OUT");
    process.exit(2);
}
