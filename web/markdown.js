// Markdown → DOM for model output, and a small code highlighter.
//
// Safety by construction: the renderer never parses HTML. It builds
// elements with createElement and puts every piece of the model's text in
// with textContent / createTextNode, so a "<script>" or "<img onerror>" in
// the output is shown as those characters. Links keep only http(s) and
// mailto targets; images are shown as links (the page's CSP loads none).
//
// Covers what models write: ATX headings, paragraphs, emphasis, strong,
// strikethrough, inline code, links, autolinks, fenced code blocks (an
// unclosed fence renders as code so far, for streaming), indented lists
// (ordered, unordered, task items), block quotes, GFM tables, rules.
'use strict';

const HearthMarkdown = (() => {
  const el = (tag, cls, text) => {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  };

  // ---- inline ------------------------------------------------------------

  const PUNCT = /[!-/:-@[-`{-~]/;
  const SAFE_URL = /^(https?:\/\/|mailto:)/i;

  function link(parent, href, fill) {
    if (!SAFE_URL.test(href)) { fill(parent); return; }
    const a = el('a');
    a.href = href;
    a.target = '_blank';
    a.rel = 'noopener noreferrer';
    fill(a);
    parent.appendChild(a);
  }

  // The index of the closing delimiter `d` for an opener at i, or -1.
  function closer(s, i, d) {
    for (let j = i + d.length; j <= s.length - d.length; j++) {
      if (s[j] === '\\') { j++; continue; }
      if (s[j] === '`') { // skip code spans
        const n = run(s, j, '`');
        const k = s.indexOf('`'.repeat(n), j + n);
        if (k > 0) { j = k + n - 1; continue; }
      }
      if (s.startsWith(d, j) && j > i + d.length && !/\s/.test(s[j - 1])) {
        if (d.length === 1 && s[j + 1] === d) { j++; continue; } // part of a double
        if (d === '_' && /[\p{L}\p{N}]/u.test(s[j + 1] || '')) continue;
        return j;
      }
    }
    return -1;
  }

  function run(s, i, c) {
    let n = 0;
    while (s[i + n] === c) n++;
    return n;
  }

  // The matching ']' for '[' at i, or -1.
  function bracket(s, i) {
    let depth = 0;
    for (let j = i; j < s.length; j++) {
      if (s[j] === '\\') { j++; continue; }
      if (s[j] === '[') depth++;
      else if (s[j] === ']' && --depth === 0) return j;
    }
    return -1;
  }

  function inline(s, parent) {
    let text = '';
    const flush = () => { if (text) { parent.appendChild(document.createTextNode(text)); text = ''; } };
    for (let i = 0; i < s.length; i++) {
      const c = s[i];
      if (c === '\\' && i + 1 < s.length && PUNCT.test(s[i + 1])) { text += s[++i]; continue; }
      if (c === '\\' && s[i + 1] === '\n') { flush(); parent.appendChild(el('br')); i++; continue; }
      if (c === '\n') {
        if (/ {2,}$/.test(text)) { text = text.replace(/ +$/, ''); flush(); parent.appendChild(el('br')); }
        else text += '\n';
        continue;
      }
      if (c === '`') {
        const n = run(s, i, '`');
        const k = s.indexOf('`'.repeat(n), i + n);
        if (k > 0 && s[k + n] !== '`') {
          flush();
          let code = s.slice(i + n, k).replace(/\n/g, ' ');
          if (/^ .* $/.test(code) && code.trim()) code = code.slice(1, -1);
          parent.appendChild(el('code', null, code));
          i = k + n - 1;
          continue;
        }
        text += '`'.repeat(n); i += n - 1; continue;
      }
      if (c === '*' || c === '_' || c === '~') {
        const n = run(s, i, c);
        const prevWord = /[\p{L}\p{N}]/u.test(s[i - 1] || '');
        if (!(c === '_' && prevWord) && !/\s/.test(s[i + n] || ' ')) {
          const tries = c === '~' ? (n === 2 ? [2] : []) : n >= 2 ? [2, 1] : [1];
          let done = false;
          for (const len of tries) {
            const d = c.repeat(len), k = closer(s, i + (n - len), d);
            if (k < 0) continue;
            flush();
            text += c.repeat(n - len);
            flush();
            const tag = c === '~' ? 'del' : len === 2 ? 'strong' : 'em';
            const e = el(tag);
            inline(s.slice(i + n, k), e);
            parent.appendChild(e);
            i = k + len - 1;
            done = true;
            break;
          }
          if (done) continue;
        }
        text += c.repeat(n); i += n - 1; continue;
      }
      if (c === '[' || (c === '!' && s[i + 1] === '[')) {
        const img = c === '!', o = i + (img ? 1 : 0), k = bracket(s, o);
        if (k > 0 && s[k + 1] === '(') {
          const m = /^\(\s*<?([^\s<>()]*(?:\([^\s<>()]*\)[^\s<>()]*)*)>?(?:\s+"[^"]*")?\s*\)/.exec(s.slice(k + 1));
          if (m) {
            flush();
            const label = s.slice(o + 1, k);
            link(parent, m[1], (p) => {
              if (img) p.appendChild(document.createTextNode(`[image: ${label || m[1]}]`));
              else inline(label, p);
            });
            i = k + m[0].length;
            continue;
          }
        }
      }
      if (c === '<') {
        const m = /^<((?:https?:\/\/|mailto:)[^\s<>]+)>/i.exec(s.slice(i));
        if (m) { flush(); link(parent, m[1], (p) => { p.textContent = m[1]; }); i += m[0].length - 1; continue; }
      }
      if (c === 'h' && !/[\p{L}\p{N}]/u.test(s[i - 1] || '')) {
        const m = /^https?:\/\/[^\s<>"'`]+[^\s<>"'`.,;:!?)\]]/.exec(s.slice(i));
        if (m) { flush(); link(parent, m[0], (p) => { p.textContent = m[0]; }); i += m[0].length - 1; continue; }
      }
      text += c;
    }
    flush();
  }

  // ---- code highlighting ---------------------------------------------------

  const KW = {
    c: 'auto break case char const continue default do double else enum extern float for goto if inline int long register restrict return short signed sizeof static struct switch typedef union unsigned void volatile while bool true false NULL nullptr class public private protected virtual template typename namespace using new delete this override final constexpr noexcept throw try catch',
    js: 'async await break case catch class const continue debugger default delete do else export extends false finally for from function if import in instanceof let new null of return static super switch this throw true try typeof undefined var void while with yield interface type enum implements readonly as',
    py: 'and as assert async await break class continue def del elif else except False finally for from global if import in is lambda None nonlocal not or pass raise return True try while with yield match case self',
    rs: 'as async await break const continue crate dyn else enum extern false fn for if impl in let loop match mod move mut pub ref return self Self static struct super trait true type unsafe use where while Some None Ok Err',
    go: 'break case chan const continue default defer else fallthrough for func go goto if import interface map package range return select struct switch type var nil true false',
    sh: 'if then else elif fi case esac for while until do done in function return local export set unset echo exit',
    sql: 'select from where insert into values update set delete create table drop alter add index join inner left right outer on group by order having limit offset as and or not null is in like distinct union primary key foreign references default',
    json: 'true false null',
  };
  const ALIAS = {
    c: 'c', h: 'c', cpp: 'c', 'c++': 'c', cc: 'c', hpp: 'c', java: 'c', cs: 'c', csharp: 'c', kotlin: 'c', swift: 'c',
    js: 'js', javascript: 'js', ts: 'js', typescript: 'js', jsx: 'js', tsx: 'js', mjs: 'js',
    py: 'py', python: 'py', rs: 'rs', rust: 'rs', go: 'go', golang: 'go',
    sh: 'sh', bash: 'sh', shell: 'sh', zsh: 'sh', console: 'sh',
    sql: 'sql', json: 'json', jsonc: 'json',
  };
  const KWSET = {};
  for (const k in KW) KWSET[k] = new Set(KW[k].split(' '));

  // Splits `code` into [class, text] tokens: comments, strings, numbers,
  // keywords, function names; the rest plain. Unknown languages get the
  // C-like rules without keywords.
  function tokens(code, lang) {
    const fam = ALIAS[(lang || '').toLowerCase()] || '';
    const kw = KWSET[fam] || new Set();
    const hash = fam === 'py' || fam === 'sh';
    const dash = fam === 'sql';
    const out = [];
    let plain = '';
    const push = (cls, t) => { if (plain) { out.push(['', plain]); plain = ''; } out.push([cls, t]); };
    const n = code.length;
    for (let i = 0; i < n;) {
      const c = code[i], rest = code.startsWith.bind(code);
      let m;
      if ((!hash && !dash && rest('//', i)) || (hash && c === '#') || (dash && rest('--', i))) {
        let k = code.indexOf('\n', i); if (k < 0) k = n;
        push('tok-com', code.slice(i, k)); i = k; continue;
      }
      if (!hash && rest('/*', i)) {
        let k = code.indexOf('*/', i + 2); k = k < 0 ? n : k + 2;
        push('tok-com', code.slice(i, k)); i = k; continue;
      }
      if (c === '"' || c === "'" || (c === '`' && fam === 'js')) {
        const triple = fam === 'py' && rest(c.repeat(3), i);
        const q = triple ? c.repeat(3) : c;
        let k = i + q.length;
        while (k < n && !rest(q, k)) { if (code[k] === '\\') k++; else if (code[k] === '\n' && q.length === 1 && c !== '`') break; k++; }
        k = Math.min(n, k + (rest(q, k) ? q.length : 0));
        push('tok-str', code.slice(i, k)); i = k; continue;
      }
      if ((m = /^(0x[\da-f_]+|\d[\d_]*(\.\d+)?(e[+-]?\d+)?)[a-z]*/i.exec(code.slice(i, i + 40))) && !/[\w$]/.test(code[i - 1] || '')) {
        push('tok-num', m[0]); i += m[0].length; continue;
      }
      if ((m = /^[A-Za-z_$][\w$]*/.exec(code.slice(i, i + 80)))) {
        const w = m[0], after = code.slice(i + w.length).match(/^\s*\(/);
        if (kw.has(fam === 'sql' ? w.toLowerCase() : w)) push('tok-kw', w);
        else if (after && fam !== 'json') push('tok-fn', w);
        else plain += w;
        i += w.length; continue;
      }
      plain += c; i++;
    }
    if (plain) out.push(['', plain]);
    return out;
  }

  function highlight(code, lang, parent) {
    for (const [cls, t] of tokens(code, lang)) {
      if (cls) parent.appendChild(el('span', cls, t));
      else parent.appendChild(document.createTextNode(t));
    }
  }

  // A code block: a bar with the language and a copy button, then the code.
  function codeBlock(code, lang, label) {
    const box = el('div', 'code-block');
    const bar = el('div', 'code-bar');
    bar.appendChild(el('span', 'code-lang', label || lang || 'text'));
    const btn = el('button', 'copy-btn', 'Copy');
    btn.type = 'button';
    btn.setAttribute('aria-label', `Copy ${label || lang || 'code'} to the clipboard`);
    btn.dataset.copy = '1';
    bar.appendChild(btn);
    const pre = el('pre');
    const c = el('code');
    if (lang) c.dataset.lang = lang;
    highlight(code, lang, c);
    pre.appendChild(c);
    pre.tabIndex = 0;
    pre.setAttribute('aria-label', `${label || lang || 'code'} block`);
    box.appendChild(bar);
    box.appendChild(pre);
    return box;
  }

  // ---- blocks --------------------------------------------------------------

  const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([^\s`]*)[^`]*$/;
  const HEADING = /^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$/;
  const RULE = /^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$/;
  const QUOTE = /^ {0,3}> ?/;
  const ITEM = /^( {0,3})([-*+]|\d{1,9}[.)])([ \t]+|$)/;
  const DELIM = /^ *\|? *:?-+:? *(\| *:?-+:? *)*\|? *$/;

  function cells(line) {
    let s = line.trim();
    if (s.startsWith('|')) s = s.slice(1);
    if (s.endsWith('|') && !s.endsWith('\\|')) s = s.slice(0, -1);
    const out = [];
    let cur = '';
    for (let i = 0; i < s.length; i++) {
      if (s[i] === '\\' && s[i + 1] === '|') { cur += '|'; i++; }
      else if (s[i] === '|') { out.push(cur.trim()); cur = ''; }
      else cur += s[i];
    }
    out.push(cur.trim());
    return out;
  }

  function table(lines, parent) {
    const head = cells(lines[0]);
    const align = cells(lines[1]).map((d) =>
      d.startsWith(':') && d.endsWith(':') ? 'center' : d.endsWith(':') ? 'right' : d.startsWith(':') ? 'left' : '');
    const wrap = el('div', 'table-wrap');
    wrap.tabIndex = 0;
    wrap.setAttribute('role', 'region');
    wrap.setAttribute('aria-label', 'Table');
    const t = el('table');
    const tr = el('tr');
    head.forEach((h, i) => { const th = el('th'); th.scope = 'col'; if (align[i]) th.dataset.align = align[i]; inline(h, th); tr.appendChild(th); });
    const thead = el('thead'); thead.appendChild(tr); t.appendChild(thead);
    const tbody = el('tbody');
    for (const line of lines.slice(2)) {
      const row = el('tr'), cs = cells(line);
      for (let i = 0; i < head.length; i++) {
        const td = el('td'); if (align[i]) td.dataset.align = align[i];
        inline(cs[i] || '', td); row.appendChild(td);
      }
      tbody.appendChild(row);
    }
    t.appendChild(tbody);
    wrap.appendChild(t);
    parent.appendChild(wrap);
  }

  function list(lines, start, parent) {
    const first = ITEM.exec(lines[start]);
    const ordered = /\d/.test(first[2]);
    const marker = ordered ? first[2].slice(-1) : first[2];
    const L = el(ordered ? 'ol' : 'ul');
    if (ordered && parseInt(first[2], 10) !== 1) L.start = parseInt(first[2], 10);
    let i = start, loose = false;
    const items = [];
    while (i < lines.length) {
      const m = ITEM.exec(lines[i]);
      if (!m || (ordered ? m[2].slice(-1) !== marker || !/\d/.test(m[2]) : m[2] !== marker)) break;
      const indent = m[1].length + m[2].length + Math.min(Math.max(m[3].length, 1), 4);
      const body = [lines[i].slice(m[0].length)];
      i++;
      while (i < lines.length) {
        const l = lines[i];
        if (!l.trim()) {
          // a blank line continues the item when indented content follows
          let j = i; while (j < lines.length && !lines[j].trim()) j++;
          if (j < lines.length && lines[j].search(/\S/) >= indent) { body.push(...lines.slice(i, j)); i = j; loose = true; continue; }
          if (j < lines.length && ITEM.exec(lines[j]) && lines[j].search(/\S/) < indent) loose = true;
          break;
        }
        const ind = l.search(/\S/);
        if (ind >= indent) { body.push(l.slice(indent)); i++; continue; }
        if (ITEM.test(l) || FENCE.test(l) || HEADING.test(l) || RULE.test(l) || QUOTE.test(l)) break;
        body.push(l.trim()); i++; // lazy continuation
      }
      items.push(body);
      while (i < lines.length && !lines[i].trim() && i + 1 < lines.length && ITEM.test(lines[i + 1])) { i++; }
    }
    for (const body of items) {
      const li = el('li');
      const task = /^\[([ xX])\][ \t]+/.exec(body[0]);
      if (task) {
        const box = el('input'); box.type = 'checkbox'; box.disabled = true; box.checked = task[1] !== ' ';
        li.className = 'task'; li.appendChild(box); body[0] = body[0].slice(task[0].length);
      }
      blocks(body, li, !loose);
      L.appendChild(li);
    }
    parent.appendChild(L);
    return i;
  }

  // Renders lines into parent. tight: a lone paragraph goes in without <p>.
  function blocks(lines, parent, tight) {
    const para = [];
    const start = parent.childNodes.length;
    let paras = 0;
    const endPara = () => {
      if (!para.length) return;
      const p = el('p');
      inline(para.join('\n').trim(), p);
      parent.appendChild(p);
      paras++;
      para.length = 0;
    };
    for (let i = 0; i < lines.length;) {
      const line = lines[i];
      let m;
      if (!line.trim()) { endPara(); i++; continue; }
      if ((m = FENCE.exec(line))) {
        endPara();
        const fence = m[1], ind = line.search(/\S/);
        const code = [];
        i++;
        while (i < lines.length && !(lines[i].trim().startsWith(fence) && /^[`~]+\s*$/.test(lines[i].trim()))) {
          code.push(lines[i].slice(Math.min(ind, lines[i].search(/\S|$/))));
          i++;
        }
        i++;
        parent.appendChild(codeBlock(code.join('\n'), m[2]));
        continue;
      }
      if ((m = HEADING.exec(line))) {
        endPara();
        const h = el(`h${m[1].length}`);
        inline(m[2] || '', h);
        parent.appendChild(h);
        i++; continue;
      }
      if (RULE.test(line) && !(para.length && /^ {0,3}-/.test(line))) {
        endPara(); parent.appendChild(el('hr')); i++; continue;
      }
      if (para.length && /^ {0,3}(=+|-+)[ \t]*$/.test(line)) { // setext heading
        const h = el(line.trim()[0] === '=' ? 'h1' : 'h2');
        inline(para.join('\n').trim(), h); para.length = 0;
        parent.appendChild(h); i++; continue;
      }
      if (QUOTE.test(line)) {
        endPara();
        const q = [];
        while (i < lines.length && lines[i].trim() && (QUOTE.test(lines[i]) || q.length)) {
          q.push(lines[i].replace(QUOTE, '')); i++;
        }
        const bq = el('blockquote');
        blocks(q, bq, false);
        parent.appendChild(bq);
        continue;
      }
      if (line.includes('|') && i + 1 < lines.length && DELIM.test(lines[i + 1]) && lines[i + 1].includes('-')) {
        endPara();
        const rows = [line, lines[i + 1]];
        i += 2;
        while (i < lines.length && lines[i].includes('|') && lines[i].trim()) rows.push(lines[i++]);
        table(rows, parent);
        continue;
      }
      if (ITEM.test(line) && (!para.length || !/^\s*\d/.test(line) || /^\s*1[.)]/.test(line))) {
        const m2 = ITEM.exec(line);
        if (m2[3] || !para.length) { endPara(); i = list(lines, i, parent); continue; }
      }
      para.push(line);
      i++;
    }
    endPara();
    // a tight list item: unwrap its one paragraph
    if (tight && paras >= 1) {
      for (let k = start; k < parent.childNodes.length; k++) {
        const n = parent.childNodes[k];
        if (n.tagName === 'P') { while (n.firstChild) parent.insertBefore(n.firstChild, n); parent.removeChild(n); break; }
      }
    }
  }

  // Renders `md` into `target` (its children are replaced).
  function render(md, target) {
    const frag = document.createDocumentFragment();
    blocks(String(md).replace(/\r\n?/g, '\n').replace(/\t/g, '    ').split('\n'), frag, false);
    target.replaceChildren(frag);
  }

  return { render, codeBlock, highlight };
})();
