// tests/peers/tok-corpus.mjs: the cross-implementation tokenizer corpus,
// generated deterministically (xorshift32 with a fixed seed), so a mismatch
// reproduces by its index.
//
//   import {buildCorpus, invalidUtf8Corpus} from "./tok-corpus.mjs";
//   const strings = buildCorpus(sharedDir);   // >= 2,000 JS strings
//   node tests/peers/tok-corpus.mjs [SHARED_DIR] > corpus.jsonl   // one JSON string a line
//
// Contents: hand-written samples per category (Latin with accents and
// combining marks, Cyrillic, Greek, Arabic, Hebrew, Devanagari, Thai, CJK,
// Japanese, Korean, emoji with ZWJ sequences, skin tones and flags, code in
// several languages, whitespace runs, digits and long numbers, contractions
// in several cases, control-token look-alikes), every input of
// ../shared/fixtures/vocab/*.inp, then random concatenations of fragments
// of all categories. invalidUtf8Corpus() gives byte strings (Uint8Array) for
// the C side only: JS strings cannot carry invalid UTF-8.
import {existsSync, readdirSync, readFileSync} from "node:fs";
import path from "node:path";

const SAMPLES = {
    latin: [
        "Hello world", "hello World!", "The quick brown fox jumps over the lazy dog.",
        "Ça va? Très bien, merci.", "Größenwahn über Straße", "naïve café résumé coöperate",
        "Español: ¿Dónde está la biblioteca? ¡Aquí!", "Føroyskt og Íslenska: þú, ð, æ",
        "Polski: zażółć gęślą jaźń", "Čeština: příliš žluťoučký kůň", "Türkçe: İstanbul ılık",
        "e\u0301 vs \u00e9 (combining acute)", "A\u030a ring, n\u0303, o\u0308",
        "Tiếng Việt: Xin chào thế giới", "ﬁ ﬂ ligatures, ß, ẞ", "ÀÉÎÕÜ àéîõü",
        "Smörgåsbord", "Œuvre d'art", "Ångström", "vis-à-vis", "coup d’état", "“quoted” ‘text’",
    ],
    cyrillic: ["Привет, мир!", "Съешь же ещё этих мягких французских булок", "Україна, Київ",
               "Български език", "ЁЖИК ёжик", "Қазақша", "Српски: Ђорђе"],
    greek: ["Γειά σου Κόσμε", "Ξεσκεπάζω την ψυχοφθόρα βδελυγμία", "ά έ ή ί ό ύ ώ ΐ ΰ",
            "Ελληνικά: ΑΒΓΔ αβγδ"],
    arabic: ["مرحبا بالعالم", "السَّلَامُ عَلَيْكُمْ", "العربية ١٢٣٤٥", "اللغة العربية جميلة"],
    hebrew: ["שלום עולם", "עִבְרִית", "אבג 123 דהו"],
    devanagari: ["नमस्ते दुनिया", "हिन्दी भाषा", "संस्कृतम्", "क्षत्रिय ज्ञान", "०१२३४५६७८९"],
    thai: ["สวัสดีชาวโลก", "ภาษาไทย", "กรุงเทพมหานคร", "๑๒๓"],
    cjk: ["你好，世界！", "我想在北京工作", "漢字と仮名", "中文测试：一二三", "龘靐齉爩",
          "日本語のテキスト、カタカナとひらがな。", "ｶﾀｶﾅ 半角", "全角：ＡＢＣ１２３"],
    korean: ["안녕하세요 세계", "한국어 텍스트", "ㄱㄴㄷ ㅏㅑㅓ", "대한민국"],
    emoji: ["🦙", "🚀🚀🚀", "😀😃😄😁", "👍🏻👍🏼👍🏽👍🏾👍🏿", "👨‍👩‍👧‍👦 family",
            "🏳️‍🌈 flag", "🇫🇷🇯🇵🇺🇸", "❤️‍🔥", "🧑🏽‍💻 coding", "😶‍🌫️", "✌️✋🏻",
            "I ❤ Unicode ☃ ★ ✓", "1️⃣ 2️⃣ #️⃣", "🤷‍♀️🤷‍♂️"],
    code: [
        "def main():\n    print(\"hello\")\n\nif __name__ == '__main__':\n    main()",
        "int main(void) {\n\treturn 0;\n}",
        "for (let i = 0; i < n; i++) { sum += a[i]; }",
        "fn main() -> Result<(), Box<dyn Error>> { Ok(()) }",
        "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;",
        "#include <stdio.h>\n#define MAX(a,b) ((a)>(b)?(a):(b))",
        "<div class=\"x\"><p>Hi</p></div>", "{\"key\": [1, 2.5, null, true]}",
        "x = y ** 2 // 3 % 4 != 5", "$ ls -la | grep foo && echo ok || exit 1",
        "public static void Main(string[] args) => Console.WriteLine(args[0]);",
        "   return x;\r\n}\r\n", "arr.map((x) => x * 2).filter(Boolean)",
        "if err != nil {\n\t\treturn nil, err\n\t}", "__init__ self._private obj.__dict__",
        "0x1F 0b1010 0o777 1e-10 3.14159f", "a+=1;b-=2;c*=3;d/=4;", "// comment\n/* block */",
    ],
    whitespace: [
        " ", "  ", "   ", "    ", "\t", "\t\t", "\n", "\n\n", "\n\n\n", "\r\n", "\r\n\r\n", " \n",
        "\n ", " \t \n", "        ", " ".repeat(33), "\t".repeat(9), "\n".repeat(17),
        " \t".repeat(8), "a  b   c    d", "a\tb\t\tc", "a\n\nb\n\n\nc", "  leading", "trailing  ",
        "\u00a0non-breaking\u00a0space", "ideographic\u3000space", "\u2003em\u2002en\u2009thin",
        "\v\f", " \r \r ", "x \n \n y", "word\n\t\tindented",
    ],
    digits: [
        "0", "1", "12", "123", "1234", "12345", "123456789", "3.14159265358979",
        "1,000,000", "1 000 000", "-42", "+7", "2024-01-15", "12:34:56", "v1.2.3",
        "31415926535897932384626433832795028841971693993751", "0000000000", "99.99%", "$1,234.56",
        "1e10", "1/2", "٣٤٥", "१२३", "①②③", "Ⅻ", "½¼¾", "²³", "１２３",
    ],
    contractions: [
        "it's", "It'S", "IT'S", "don't", "DON'T", "Don'T", "we'll", "WE'LL", "We'Ll", "I'm", "I'M",
        "they're", "THEY'RE", "you've", "YOU'VE", "he'd", "HE'D", "'s", "'S", "'t", "'T", "'ll",
        "'LL", "'re", "'RE", "'ve", "'VE", "'m", "'M", "'d", "'D", "rock 'n' roll", "'''",
        "ain't", "y'all'd've", "o'clock", "L'amour", "’s curly", "x's y'T z'LL",
    ],
    specials: [
        "<|im_end|>", "<|im_start|>user\nhi<|im_end|>", "<s>", "</s>", "<s> text </s>",
        "<|endoftext|>", "a<|endoftext|>b", "<|begin_of_text|>", "<|eot_id|>",
        "<|start_header_id|>user<|end_header_id|>", "<bos>", "<eos>", "<start_of_turn>user",
        "<end_of_turn>", "<unk>", "<pad>", "<mask>", "<think>", "</think>", "<tool_call>",
        "<｜begin▁of▁sentence｜>", "<｜User｜>", "<|fim_prefix|>", "[INST]", "[/INST]",
        "<<SYS>>", "<|im_end", "im_end|>", "<|", "|>", "< s>", "<0x0A>", "▁", "▁▁hello",
        "<unused0>", "<|reserved_special_token_3|>", "<table>", "</table>",
    ],
};

// xorshift32
function rng(seed) {
    let s = seed >>> 0;
    return (n) => {
        s ^= s << 13;
        s >>>= 0;
        s ^= s >>> 17;
        s ^= s << 5;
        s >>>= 0;
        return s % n;
    };
}

// Inputs of ../shared/fixtures/vocab/*.inp (separated by __ggml_vocab_test__ lines).
export function readInp(file) {
    const parts = readFileSync(file, "utf8").split("\n__ggml_vocab_test__\n");
    // the file ends with the separator line: drop the empty tail
    if (parts.length && parts[parts.length - 1] === "")
        parts.pop();
    return parts;
}

export function fixtureInputs(sharedDir) {
    const dir = path.join(sharedDir, "fixtures/vocab");
    const out = [];
    if (!existsSync(dir))
        return out;
    for (const f of readdirSync(dir).sort())
        if (f.endsWith(".inp"))
            out.push(...readInp(path.join(dir, f)));
    return out;
}

export function buildCorpus(sharedDir, nTotal = 2400) {
    const seen = new Set();
    const out = [];
    const add = (s) => {
        if (s.length && !seen.has(s)) {
            seen.add(s);
            out.push(s);
        }
    };
    const all = [];
    for (const list of Object.values(SAMPLES))
        for (const s of list) {
            add(s);
            all.push(s);
        }
    for (const s of fixtureInputs(sharedDir))
        add(s);
    // each sample with a leading space, and upper-cased
    for (const s of all) {
        add(" " + s);
        add(s.toUpperCase());
    }
    const r = rng(0x5eed1234);
    const glue = ["", " ", "  ", "\n", "\t", ", ", ". ", "\n\n", " \n "];
    const cats = Object.keys(SAMPLES);
    while (out.length < nTotal) {
        const k = 1 + r(6);
        let s = "";
        for (let j = 0; j < k; j++) {
            const list = SAMPLES[cats[r(cats.length)]];
            let frag = list[r(list.length)];
            if (r(4) === 0) { // a random slice by code points (may cut a ZWJ sequence)
                const cps = Array.from(frag);
                const a = r(cps.length), b = a + 1 + r(cps.length - a);
                frag = cps.slice(a, b).join("");
            }
            s += (j ? glue[r(glue.length)] : "") + frag;
        }
        add(s);
    }
    return out;
}

// Byte strings with invalid UTF-8 (C side only).
export function invalidUtf8Corpus() {
    const b = (...xs) => Uint8Array.from(xs);
    const t = (s) => Array.from(Buffer.from(s, "utf8"));
    return [
        b(0xff), b(0xfe, 0xff), b(0x80), b(0xbf, 0x80), b(0xc0, 0xaf), b(0xc3),
        b(...t("abc"), 0xc3), b(0xe2, 0x82), b(...t("x"), 0xe2, 0x82, ...t("y")),
        b(0xf0, 0x9f, 0x98), b(0xf0, 0x9f, 0x98, ...t(" ok")), b(0xed, 0xa0, 0x80),
        b(0xf4, 0x90, 0x80, 0x80), b(0xf8, 0x88, 0x80, 0x80, 0x80), b(0xe0, 0x80, 0xaf),
        b(...t("hello "), 0xff, ...t(" world")), b(...t("日本"), 0x80, ...t("語")),
        b(0x00), b(...t("a"), 0x00, ...t("b")), b(...Array(64).fill(0xff)),
        b(...t("it's "), 0xc0, ...t("'LL 123")), b(0xc2, 0x41), b(0xe1, 0x80, 0x41),
    ];
}

if (import.meta.url === `file://${process.argv[1]}`) {
    const shared = process.argv[2] || process.env.STRATA_SHARED_DIR || "../shared";
    for (const s of buildCorpus(shared))
        process.stdout.write(JSON.stringify(s) + "\n");
}
