#!/usr/bin/env node
// Writes the tokenizer parity corpus (deterministic: a seeded PRNG, no external data).
// Usage: node make_corpus.mjs corpus.json
// Format: a JSON array of {"cat": CATEGORY, "text": STRING} or, for strings that are not valid
// UTF-8, {"cat": CATEGORY, "b64": BASE64 OF THE BYTES}. Readers that need a string (JavaScript,
// llama.cpp through node-llama-cpp) decode the bytes with a replacing UTF-8 decoder.
import fs from "node:fs";

let seed = 0x9E3779B9;
function rnd() {  // xorshift32
    seed ^= seed << 13; seed >>>= 0;
    seed ^= seed >>> 17;
    seed ^= seed << 5; seed >>>= 0;
    return seed / 4294967296;
}
const ri = (n) => Math.floor(rnd() * n);
const pick = (a) => a[ri(a.length)];
const range = (a, b) => Array.from({ length: b - a + 1 }, (_, i) => String.fromCodePoint(a + i));
const repeat = (n, f) => Array.from({ length: n }, f);

const out = [];
const seen = new Set();
function add(cat, s) {
    if (typeof s === "string") {
        if (!s.isWellFormed()) throw new Error(`not well-formed: ${cat}`);
        if (seen.has(s)) return;
        seen.add(s);
        out.push({ cat, text: s });
    } else {
        const b64 = Buffer.from(s).toString("base64");
        if (seen.has("b64:" + b64)) return;
        seen.add("b64:" + b64);
        out.push({ cat, b64 });
    }
}

// ---- word material ----
const words = ("the of and to in is was that for it with as his on be at by had this not but from are or have an they which one you were " +
    "her all she there would their we him been has when who will more no if out so said what up its about into than them can only other " +
    "new some could time these two may then do first any my now such like our over man me even most made after also did many before must " +
    "through back years where much your way well down should because each just those people how too little state good very make world still " +
    "own see men work long get here between both life being under never day same another know while last might us great old year off come " +
    "since against go came right used take three tokenizer model inference kernel quantization attention transformer vocabulary merge rank " +
    "Paris London Tokyo Moscow Cairo Mumbai NASA OpenAI Kimi Moonshot GitHub JavaScript PyTorch").split(" ");
const sentenceEnds = [".", "!", "?", "...", ";", ":", " —", "?!"];
function sentence() {
    const n = 3 + ri(14);
    let s = repeat(n, () => pick(words)).join(" ");
    s = s[0].toUpperCase() + s.slice(1);
    if (rnd() < 0.3) s = s.replace(" ", ", ");
    if (rnd() < 0.15) s += ` "${pick(words)} ${pick(words)}"`;
    if (rnd() < 0.1) s += ` (${pick(words)})`;
    return s + pick(sentenceEnds);
}
const ident = () => pick(["x", "i", "n", "buf", "count", "user_id", "maxValue", "HTTPServer", "_tmp", "kBlockSize", "parse_json", "self", "ctx", "tokens", "dataFrame"]);

// ---- 1. English prose ----
for (let i = 0; i < 420; i++) {
    const k = 1 + ri(4);
    add("prose", repeat(k, sentence).join(pick([" ", "  ", "\n", "\n\n", " "])));
}

// ---- 2. code ----
const codeGen = [
    () => `def ${ident()}(${ident()}, ${ident()}=None):\n    """${sentence()}"""\n    if ${ident()} is None:\n        return []\n    return [${ident()} * 2 for ${ident()} in range(${ri(100)})]\n`,
    () => `for (int ${ident()} = 0; ${ident()} < ${ri(1000)}; ++${ident()}) {\n\t${ident()}[i] += ${ident()}->${ident()}(${ri(9)});\n}`,
    () => `const ${ident()} = async (${ident()}) => { await fetch(\`/api/v${ri(3)}/${pick(words)}?id=\${${ident()}}\`); };`,
    () => `fn ${ident()}<'a>(${ident()}: &'a str) -> Result<Vec<u8>, Box<dyn Error>> {\n    let mut v = Vec::with_capacity(${ri(64)});\n    v.extend_from_slice(${ident()}.as_bytes());\n    Ok(v)\n}`,
    () => `func (s *${ident()}) ${ident()}(ctx context.Context) error {\n\tif err := s.db.PingContext(ctx); err != nil {\n\t\treturn fmt.Errorf("ping: %w", err)\n\t}\n\treturn nil\n}`,
    () => `SELECT ${ident()}, COUNT(*) AS n FROM ${pick(words)}_table WHERE ${ident()} >= ${ri(500)} AND name LIKE '%${pick(words)}%' GROUP BY 1 ORDER BY n DESC;`,
    () => `<div class="${pick(words)}-${pick(words)}" id='${ident()}'><a href="https://example.com/${pick(words)}?q=${ri(99)}&amp;lang=en">${sentence()}</a></div>`,
    () => JSON.stringify({ [ident()]: ri(1e6), name: sentence(), tags: [pick(words), pick(words)], ok: rnd() < 0.5, ratio: rnd() }, null, rnd() < 0.5 ? 2 : 0),
    () => `#!/bin/bash\nset -euo pipefail\nfor f in *.${pick(["txt", "md", "json"])}; do\n  grep -c '${pick(words)}' "$f" || true\ndone | sort -n | tail -${ri(10)}`,
    () => `#include <vector>\ntemplate <typename T>\nstatic inline T ${ident()}(const std::vector<T>& v) noexcept { return v.empty() ? T{} : v[v.size() / 2]; }`,
    () => `    // TODO(${pick(words)}): ${sentence()}\n    ${ident()} = ${ident()} ?? ${ri(7)};  /* ${pick(words)} */`,
    () => `$ ${pick(["ls -la", "git log --oneline -n 5", "cmake -S . -B build -G Ninja", "python3 -m pip install -U numpy==1.26.4"])}\n${pick(words)}@host:~$ echo "$((${ri(99)} + ${ri(99)}))"`,
    () => `\\begin{equation} E = mc^2 + \\sum_{i=0}^{${ri(20)}} \\alpha_i x^{i} \\end{equation}`,
    () => `matrix = [[${repeat(4, () => ri(100)).join(", ")}],\n          [${repeat(4, () => (rnd() * 10).toFixed(3)).join(", ")}]]`,
];
for (let i = 0; i < 420; i++) add("code", pick(codeGen)());

// ---- 3. numbers and digit runs ----
const digitsOf = (n) => repeat(n, () => String(ri(10))).join("");
for (let i = 0; i < 60; i++) add("numbers", digitsOf(1 + ri(40)));
for (let i = 0; i < 40; i++) add("numbers", `${ri(100000)}.${digitsOf(1 + ri(8))} ${pick(["kg", "%", "USD", "ms", "GB/s"])}`);
for (let i = 0; i < 30; i++) add("numbers", `${(ri(1e9)).toLocaleString("en-US")} and ${ri(1e6).toLocaleString("de-DE")} or ${(rnd() * 1e-5).toExponential(3)}`);
for (let i = 0; i < 20; i++) add("numbers", `+1 (${digitsOf(3)}) ${digitsOf(3)}-${digitsOf(4)}, ${2000 + ri(30)}-${String(1 + ri(12)).padStart(2, "0")}-${String(1 + ri(28)).padStart(2, "0")}T${digitsOf(2)}:${digitsOf(2)}Z`);
const exoticDigits = ["٠١٢٣٤٥٦٧٨٩", "۰۱۲۳۴۵۶۷۸۹", "०१२३४५६७८९", "０１２３４５６７８９", "½¼¾⅓", "²³¹⁴⁵", "ⅠⅡⅢⅫⅯ", "①②③⑩⑳", "〇〡〢〣", "𝟎𝟏𝟐𝟗", "𐒠𐒡", "፩፪፫", "๐๑๒๓"];
for (let i = 0; i < 50; i++) add("numbers", `${pick(words)} ${[...pick(exoticDigits)].slice(0, 1 + ri(10)).join("")}${rnd() < 0.5 ? digitsOf(1 + ri(6)) : ""} x${pick(exoticDigits)}`);

// ---- 4. whitespace and newline runs ----
const wsChars = [" ", " ", " ", "\t", "\n", "\n", "\r\n", "\r", "\u000B", "\u000C", "\u00A0", "\u3000", "\u2028", "\u2029", "\u0085", "\uFEFF", "\u200B", "\u2003", "\u202F", "\u1680", "\u180E", "\u001C", "\u001F"];
const wsRun = () => repeat(1 + ri(8), () => pick(wsChars)).join("");
for (let i = 0; i < 220; i++) {
    const parts = repeat(1 + ri(4), () => (rnd() < 0.5 ? pick(words) : pick(["x", "!", "1", "你", "é", "—", "}"])));
    let s = "";
    for (const p of parts) s += wsRun() + p;
    if (rnd() < 0.6) s += wsRun();
    add("whitespace", s);
}
for (const n of [1, 2, 3, 10, 100, 600]) {
    add("whitespace", " ".repeat(n));
    add("whitespace", "\n".repeat(n));
    add("whitespace", " ".repeat(n) + "x");
    add("whitespace", "\t".repeat(n) + "\n" + " ".repeat(n));
}

// ---- 5. contractions ----
const contr = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ve", "'M", "'LL", "'D", "’s", "’t", "'ſ", "'x", "'", "''", "'ll've"];
for (let i = 0; i < 160; i++) {
    const w = pick(["don", "I", "she", "they", "we", "it", "O", "rock", "y", "ma", "SHE", "You", "l", "Dʼ", "жи", "你"]);
    add("contractions", `${w}${pick(contr)}${pick(["", " ", "cha", "n", "s", "!", "'s", "123", "\n"])}${pick(words)}`);
}
for (const s of ["don't", "DON'T", "Don'tcha", "rock'n'roll", "O'Neil's", "it’s", "'hello", "' s", "I'M", "you'RE", "we'Ve", "they'LL", "he'D", "'s'", "can't've", "''", "'''s"])
    add("contractions", s);

// ---- 6. mixed case ----
const caseWord = () => pick(["camelCase", "PascalCase", "ALLCAPS", "mIxEdCaSe", "iPhone", "HTTPServer", "snake_case", "XMLHttpRequest", "getHTTPResponseCode", "ABCdef", "abcDEF", "McDonald", "ÀÉÎõü", "ǅemal", "ΣΊΣΥΦΟΣ", "ǈubljana", "ßtraße", "İstanbul", "ĳsselmeer"]);
for (let i = 0; i < 160; i++) add("mixed_case", repeat(1 + ri(4), caseWord).join(pick(["", " ", "_", "-", ".", "'s "])));

// ---- 7. CJK ----
const han = "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之过家学对可她里后小么心多天而能好都然没日于起还发成事只作当想看文无开手十用主行方又如前所本见经头面公同三已老从动两长知民样现分将外但身些与高意进把法此实回二理美点月明其种声全工己话儿者向情部正名定女问力机给等几很业最间新什打便位因重被走电四第门相次东政海口使教西再平真听世气信北少关并内加化由却代军产入先山五太水万市眼体别处总才场师书比住员九笑性通目华报立马命张活难神数件安表原车白应路期叫死常提感金何更反合放做系计或司利受光王果亲界及今京务制解各任至清物台象记边共风战干接它许八特觉望直服毛林题建南度统色字请交爱让认算论百吃义科怎元社术结六功指思非流每青管夫连远资队跟带花快条院变联言权往展该领传近留红治决周保达办运武半候七必城父强步完革深区即求品士转量空甚众技轻程告江语英基派满式李息写呢识极令黄德收脸钱党倒未持取设始版双历越史商千片容研像找友孩站广改议形委早房音火际则首单据导影失拿网香似斯专石若兵弟谁校读志飞观争究包组造落视济喜离虽坏兴切";
const hira = range(0x3041, 0x3096).join(""), kata = range(0x30A1, 0x30FA).join(""), hangul = "한국어로된문장입니다서울부산대한민국사람학교공부하다먹다";
const cjkRare = ["\u3400\u3401\u4DB5", "\u{20000}\u{20001}\u{2A6D6}", "\u{2A700}\u{2B734}", "\u{2B740}\u{2B81D}", "\u{2B820}\u{2CEA1}", "\u{2CEB0}\u{2EBE0}", "\uF900\uF901\uFA6D", "\u{2F800}\u{2FA1D}",
    "々〆〇〡〢〩", "⺀⺁⻳⼀⿕", "\u{30000}\u{3134A}", "\u{31350}\u{323AF}", "\u{2EBF0}\u{2EE5D}", "㊀㊤", "〜〝〞", "\u9FFF\u9FFE", "\uFA6E\uFA6F", "\u{2FA1E}", "\u{2EBEF}", "\u{2B73A}\u{2B73F}", "ｶﾀｶﾅ", "ＡＢＣａｂｃ"];
const cjkPunct = ["，", "。", "、", "「", "」", "！", "？", "：", "（", "）", "《", "》", "・", "ー"];
const hanRun = () => repeat(1 + ri(12), () => han[ri(han.length)]).join("");
for (let i = 0; i < 260; i++) {
    const f = [hanRun, () => hira.slice(ri(40), ri(40) + 2 + ri(8)), () => kata.slice(ri(40), ri(40) + 2 + ri(8)), () => hangul.slice(ri(20), ri(20) + 2 + ri(10)), () => pick(cjkRare), () => pick(cjkPunct), () => pick(words), () => String(ri(2025)), () => " "];
    add("cjk", repeat(1 + ri(6), () => pick(f)()).join(""));
}

// ---- 8. Cyrillic ----
const cyr = "Привет мир как дела Москва Россия съешь же ещё этих мягких французских булок да выпей чаю ЁЖИК Ёлка Україна Київ ґанок Беларусь ўсё Србија ђак љубав њива џеп Македонија ѓ ќ".split(" ");
for (let i = 0; i < 160; i++) add("cyrillic", repeat(1 + ri(10), () => pick(cyr)).join(pick([" ", " ", ", ", "-", "\n"])) + pick(["", ".", "!", "?", " 2024", "'s"]));

// ---- 9. Arabic ----
const arab = "السلام عليكم مرحبا بالعالم اللغة العربية مُحَمَّد كِتَابٌ القُرْآن الكَرِيم ١٢٣ ٤٥٦ فارسی زبان اردو پاکستان ﷺ ﷲ عَرَبِيّ".split(" ");
for (let i = 0; i < 160; i++) add("arabic", (rnd() < 0.2 ? "\u200F" : "") + repeat(1 + ri(8), () => pick(arab)).join(pick([" ", " ", "، ", "\n"])) + pick(["", ".", "؟", " 2024", " (abc)"]));

// ---- 10. Devanagari and other Indic / South-East Asian ----
const indic = "नमस्ते दुनिया हिन्दी भाषा संस्कृतम् क्षत्रिय ज्ञान श्री मराठी নমস্কার বাংলা தமிழ் வணக்கம் తెలుగు ಕನ್ನಡ മലയാളം ગુજરાતી ਪੰਜਾਬੀ ภาษาไทย สวัสดี ພາສາລາວ ខ្មែរ မြန်မာ".split(" ");
for (let i = 0; i < 160; i++) add("indic", repeat(1 + ri(8), () => pick(indic)).join(pick([" ", " ", "। ", ", "])) + pick(["", "।", " 123", " १२३"]));

// ---- 11. emoji and ZWJ sequences ----
const emoji = ["😀", "👍", "👍🏽", "👨‍👩‍👧‍👦", "👩🏾‍💻", "🏳️‍🌈", "🇯🇵", "🇺🇸", "#️⃣", "1️⃣", "❤️", "❤", "🫠", "🫨", "🪿", "\u{1FAE9}", "\u{1FAC8}", "🧑‍🤝‍🧑", "🐈‍⬛", "☺︎", "©", "™", "👁️‍🗨️", "🏴󠁧󠁢󠁳󠁣󠁴󠁿", "🤷‍♀️", "💁🏻‍♂️"];
for (let i = 0; i < 160; i++) add("emoji", repeat(1 + ri(6), () => (rnd() < 0.7 ? pick(emoji) : pick(words))).join(pick(["", " ", "\u200D", "!"])));

// ---- 12. combining marks ----
const marks = range(0x300, 0x36F);
const zalgo = (w) => [...w].map((c) => c + repeat(ri(5), () => pick(marks)).join("")).join("");
for (let i = 0; i < 100; i++) add("combining", zalgo(pick(words)) + pick(["", " ", "s", "\u0301", "!"]) + pick(words));
const combFixed = ["cafe\u0301s", "e\u0301", "n\u0303o", "Tie\u0302\u0301ng Vie\u0323\u0302t", "Tiếng Việt", "שָׁלוֹם עֲלֵיכֶם", "בְּרֵאשִׁית", "a\u20DD", "x\u0338", "\u0301abc", " \u0301", "1\u0301", "ﬁ", "ŉ", "ǆ", "\u0345", "\u{1D15E}", "à", "à", "Å", "Å", "\u093F", "क़", "가", "가"];
for (const s of combFixed) { add("combining", s); add("combining", s + " " + s.toUpperCase()); }
for (let i = 0; i < 30; i++) add("combining", pick(combFixed) + pick(words) + pick(combFixed));

// ---- 13. invalid UTF-8 ----
const te = new TextEncoder();
const badSeqs = [[0x80], [0xBF], [0xC0, 0xAF], [0xC1, 0xBF], [0xC3], [0xE2, 0x82], [0xE0, 0x80, 0xAF], [0xED, 0xA0, 0x80], [0xED, 0xBF, 0xBF], [0xF0, 0x9F, 0x98], [0xF4, 0x90, 0x80, 0x80], [0xF5, 0x80, 0x80, 0x80], [0xF8, 0x88, 0x80, 0x80, 0x80], [0xFE], [0xFF], [0xFF, 0xFE], [0xC2, 0x41], [0xE2, 0x28, 0xA1], [0xF0, 0x28, 0x8C, 0xBC], [0x00], [0xEF, 0xBF, 0xBD]];
for (let i = 0; i < 170; i++) {
    const parts = [];
    const k = 1 + ri(5);
    for (let j = 0; j < k; j++) {
        if (rnd() < 0.5) parts.push(...pick(badSeqs));
        else parts.push(...te.encode(pick([pick(words), " ", "你好", "é", "😀", "\n", "123", "<|open|>"])));
    }
    if (!Buffer.from(parts).toString("utf8").isWellFormed() || Buffer.from(Buffer.from(parts).toString("utf8")).compare(Buffer.from(parts)) !== 0)
        add("invalid_utf8", Uint8Array.from(parts));
}

// ---- 14. very long words ----
const letters = "abcdefghijklmnopqrstuvwxyz";
// Lengths stay below ~700 bytes: js-tiktoken's reference BPE is cubic in the piece length.
for (const n of [65, 100, 257, 400, 600]) {
    add("long", "a".repeat(n));
    add("long", repeat(n, () => letters[ri(26)]).join(""));
    add("long", digitsOf(n));
    add("long", "ab".repeat(n / 2));
    add("long", "=".repeat(n));
    add("long", hanRun().repeat(Math.ceil(n / 8)).slice(0, Math.floor(n / 3)));
    add("long", "x" + " ".repeat(n) + "y");
    add("long", Buffer.from(repeat(n, () => ri(256))).toString("base64"));
}
for (let i = 0; i < 12; i++) add("long", "https://" + repeat(20 + ri(40), () => pick(words)).join("/") + "?" + repeat(10, () => `${pick(words)}=${ri(1e6)}`).join("&"));
add("long", "Supercalifragilisticexpialidocious".repeat(15));
add("long", "Привет".repeat(50));
add("long", "नमस्ते".repeat(30));
add("long", "😀".repeat(150));
add("long", "\u0301".repeat(300));

// ---- 15. special-token strings ----
const k3Specials = ["[BOS]", "[EOS]", "<|end_of_msg|>", "<|open|>", "<|close|>", "<|sep|>", "[start_header_id]", "[end_header_id]", "[EOT]", "<|media_begin|>", "<|media_content|>", "<|media_end|>", "<|media_pad|>", "<osagent_mode>", "[UNK]", "[PAD]", "<|reserved_token_163700|>", "<|reserved_token_163592|>"];
const otherSpecials = ["<|endoftext|>", "<|endofprompt|>", "<|fim_prefix|>", "<|open", "open|>", "<||>", "<|reserved_token_|>", "[BOS", "<|<|open|>|>", "[[EOS]]", "<|im_start|>", "<s>", "</s>"];
const msg = () => `<|open|>message role="${pick(["user", "assistant", "system"])}"<|sep|>${sentence()}<|close|>message<|sep|>`;
for (let i = 0; i < 170; i++) {
    const f = [() => pick(k3Specials), () => pick(otherSpecials), () => pick(words), () => " ", () => "\n", msg, () => "你好", () => sentence()];
    add("special", repeat(1 + ri(6), () => pick(f)()).join(""));
}
for (const s of k3Specials) { add("special", s); add("special", ` ${s} `); add("special", `x${s}y`); }

// ---- 16. Unicode version probes (15.0, 15.1, 16.0, 17.0 additions; property changes) ----
const probes = ["\u0295", "\u0CF3", "\u0ECE", "\u{10EFD}", "\u{1123F}", "\u{11B00}", "\u{11F04}", "\u{1E030}", "\u{1E4D0}", "\u{1D2C0}", "\u{1E4F0}", "\u{1F6DC}", "\u{1FA75}",
    "\u{2EBF0}", "\u{2EE5D}", "\u2FFC", "\u31EF", "\u{31350}",
    "\u{105C0}", "\u{10D40}", "\u{10D40}\u{10D41}", "\u{11380}", "\u{16100}", "\u{16D40}", "\u{1E5D0}", "\u{1E5F1}", "\u{1CCF0}", "\u{1CCF9}", "\u{1FAE9}", "\u{1FBF0}", "\u{16130}", "\u{1172C}",
    "\u{323B0}", "\u{2EE60}", "\u{10940}", "\u{11DB0}", "\u{16EA0}", "\u{1E6C0}", "\u{1FAEA}", "\u{11B60}", "\u{16FF2}", "\u1ACF", "\u{10EC5}", "\u{16ED3}",
    "\uFA6E", "\u{2FA1E}", "\u{2EBEF}", "\u{2CEAF}", "\u{2A6E0}", "\u3005", "\u3007", "\u2E80", "\u{30000}"];
for (const p of probes) {
    add("unicode_versions", `a${p}b`);
    add("unicode_versions", `!${p}!`);
    add("unicode_versions", `1${p}2`);
    add("unicode_versions", ` ${p}x ${p}${p}`);
}

// ---- 17. random mixtures ----
const all = out.filter((e) => e.text !== undefined && e.text.length < 300).map((e) => e.text);
for (let i = 0; i < 320; i++) add("mixed", repeat(2 + ri(4), () => { const t = [...pick(all)]; const a = ri(t.length); return t.slice(a, a + 1 + ri(60)).join(""); }).join(""));

const counts = {};
for (const e of out) counts[e.cat] = (counts[e.cat] ?? 0) + 1;
fs.writeFileSync(process.argv[2] ?? "corpus.json", "[\n" + out.map((e) => JSON.stringify(e)).join(",\n") + "\n]\n");
console.error(`${out.length} strings:`, JSON.stringify(counts));
