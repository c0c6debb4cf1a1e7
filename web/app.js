// hearth's chat page: conversations in localStorage, answers streamed from
// /v1/chat/completions (SSE) and rendered as Markdown, settings, /stats.
'use strict';

(() => {
  const $ = (id) => document.getElementById(id);
  const el = (tag, cls, text) => {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  };

  // ---- storage ---------------------------------------------------------------

  const KEY_CONVS = 'hearth.conversations.v1', KEY_SETTINGS = 'hearth.settings.v1',
    KEY_THEME = 'hearth.theme', KEY_CURRENT = 'hearth.current';
  const load = (k, d) => { try { const v = JSON.parse(localStorage.getItem(k)); return v ?? d; } catch { return d; } };
  const store = (k, v) => {
    try { localStorage.setItem(k, JSON.stringify(v)); }
    catch (e) { toast(`Could not save: ${e.message}`); }
  };

  // conversation: {id, title, created, updated, messages: [message]}
  // message: {role, content, tool_calls?, format?, stats?, finish?, error?}
  let convs = load(KEY_CONVS, []);
  if (!Array.isArray(convs)) convs = [];
  const DEFAULTS = { system: '', temperature: '', top_p: '', max_tokens: '', seed: '', format: 'text', schema: '', tools: '', extra: '' };
  const settings = { ...DEFAULTS, ...load(KEY_SETTINGS, {}) };
  let current = null;      // the open conversation, or null for a new one
  let gen = null;          // {ctrl, conv, msg, node} while an answer streams

  const saveConvs = () => store(KEY_CONVS, convs);
  const newId = () => Date.now().toString(36) + Math.random().toString(36).slice(2, 8);

  // ---- small helpers -----------------------------------------------------------

  let toastTimer;
  function toast(msg) {
    const t = $('toast');
    t.textContent = msg;
    t.classList.add('show');
    clearTimeout(toastTimer);
    toastTimer = setTimeout(() => t.classList.remove('show'), 2500);
  }

  async function copyText(text) {
    try {
      if (navigator.clipboard && window.isSecureContext) { await navigator.clipboard.writeText(text); return true; }
    } catch { /* fall back below */ }
    const ta = el('textarea'); ta.value = text; ta.setAttribute('readonly', '');
    ta.className = 'sr-only'; document.body.appendChild(ta); ta.select();
    let ok = false;
    try { ok = document.execCommand('copy'); } catch { ok = false; }
    ta.remove();
    return ok;
  }

  function download(name, data) {
    const blob = new Blob([JSON.stringify(data, null, 2)], { type: 'application/json' });
    const a = el('a');
    a.href = URL.createObjectURL(blob);
    a.download = name;
    document.body.appendChild(a); a.click(); a.remove();
    setTimeout(() => URL.revokeObjectURL(a.href), 1000);
  }

  const slug = (s) => (s || 'conversation').toLowerCase().replace(/[^a-z0-9]+/g, '-').replace(/^-|-$/g, '').slice(0, 40) || 'conversation';
  const fmt = (n, d = 1) => (n == null || !isFinite(n) ? '–' : Number(n).toFixed(d));

  // ---- theme -------------------------------------------------------------------

  function applyTheme(t) {
    document.documentElement.dataset.theme = t;
    const other = t === 'dark' ? 'light' : 'dark';
    $('theme-btn').setAttribute('aria-label', `Switch to ${other} theme`);
    $('theme-btn').title = `Switch to ${other} theme`;
  }
  const systemTheme = () => (matchMedia('(prefers-color-scheme: dark)').matches ? 'dark' : 'light');
  applyTheme(load(KEY_THEME, null) || systemTheme());
  $('theme-btn').addEventListener('click', () => {
    const t = document.documentElement.dataset.theme === 'dark' ? 'light' : 'dark';
    applyTheme(t); store(KEY_THEME, t);
  });

  // ---- panels (settings, stats) and the phone drawer ----------------------------

  const panels = { settings: $('settings-btn'), stats: $('stats-btn') };
  function openPanel(name, open) {
    for (const [n, btn] of Object.entries(panels)) {
      const show = n === name ? open : false;
      $(n).hidden = !show;
      btn.setAttribute('aria-expanded', String(show));
    }
    if (name === 'stats') (open ? startStats : stopStats)();
    if (open) $(name).querySelector('.panel-body input, .panel-body textarea, .close')?.focus();
  }
  for (const [n, btn] of Object.entries(panels)) btn.addEventListener('click', () => openPanel(n, $(n).hidden));
  document.querySelectorAll('[data-close]').forEach((b) => b.addEventListener('click', () => {
    openPanel(b.dataset.close, false); panels[b.dataset.close].focus();
  }));

  function drawer(open) {
    document.body.classList.toggle('drawer-open', open);
    $('menu').setAttribute('aria-expanded', String(open));
    $('scrim').hidden = !open;
    if (open) $('new-chat').focus();
  }
  $('menu').addEventListener('click', () => drawer(!document.body.classList.contains('drawer-open')));
  $('scrim').addEventListener('click', () => drawer(false));

  // ---- settings ----------------------------------------------------------------

  const FIELDS = ['system', 'temperature', 'top_p', 'max_tokens', 'seed', 'format', 'schema', 'tools', 'extra'];
  const input = (f) => $(f === 'format' ? 'set-format' : `set-${f}`);
  function showSettings() {
    for (const f of FIELDS) input(f).value = settings[f] ?? '';
    $('schema-field').hidden = settings.format !== 'json_schema';
  }
  for (const f of FIELDS) {
    input(f).addEventListener('input', () => {
      settings[f] = input(f).value;
      $('schema-field').hidden = settings.format !== 'json_schema';
      store(KEY_SETTINGS, settings);
      checkSettings();
    });
  }
  $('settings-reset').addEventListener('click', () => {
    Object.assign(settings, DEFAULTS); store(KEY_SETTINGS, settings); showSettings(); checkSettings();
  });

  const parseJson = (text, what, want) => {
    if (!text.trim()) return undefined;
    let v;
    try { v = JSON.parse(text); } catch (e) { throw new Error(`${what}: ${e.message}`); }
    if (want === 'array' ? !Array.isArray(v) : (typeof v !== 'object' || v === null || Array.isArray(v)))
      throw new Error(`${what} must be a JSON ${want}`);
    return v;
  };

  // The request body for the open conversation (throws on bad settings).
  function requestBody(conv) {
    const body = { messages: [], stream: true, stream_options: { include_usage: true } };
    const model = $('model').value;
    if (model) body.model = model;
    if (settings.system.trim()) body.messages.push({ role: 'system', content: settings.system });
    for (const m of conv.messages) {
      const out = { role: m.role, content: m.content ?? '' };
      if (m.tool_calls?.length) out.tool_calls = m.tool_calls;
      body.messages.push(out);
    }
    const num = (f, int) => {
      const s = String(settings[f]).trim();
      if (!s) return;
      const v = Number(s);
      if (!isFinite(v) || (int && !Number.isInteger(v))) throw new Error(`${f} must be a${int ? 'n integer' : ' number'}`);
      body[f] = v;
    };
    num('temperature'); num('top_p'); num('max_tokens', true); num('seed', true);
    if (settings.format === 'json_object') body.response_format = { type: 'json_object' };
    if (settings.format === 'json_schema') {
      const schema = parseJson(settings.schema, 'JSON Schema', 'object');
      if (!schema) throw new Error('JSON Schema: empty');
      body.response_format = { type: 'json_schema', json_schema: { name: 'output', schema, strict: true } };
    }
    const tools = parseJson(settings.tools, 'Tools', 'array');
    if (tools?.length) body.tools = tools;
    Object.assign(body, parseJson(settings.extra, 'Extra request fields', 'object') || {});
    return body;
  }

  function checkSettings() {
    let msg = '';
    try { requestBody({ messages: [] }); } catch (e) { msg = e.message; }
    $('settings-error').textContent = msg;
    return !msg;
  }

  // ---- models and stats ------------------------------------------------------------

  async function loadModels() {
    const sel = $('model');
    try {
      const r = await fetch('/v1/models');
      const j = await r.json();
      sel.replaceChildren();
      for (const m of j.data || []) sel.appendChild(el('option', null, m.id));
      if (!sel.options.length) sel.appendChild(el('option', null, 'default_model'));
      sel.title = `Model: ${sel.value}`;
      sel.onchange = () => { sel.title = `Model: ${sel.value}`; };
    } catch (e) {
      sel.replaceChildren(el('option', null, 'server unreachable'));
    }
  }

  let statsTimer = null;
  function statsRow(dl, k, v) { dl.appendChild(el('dt', null, k)); dl.appendChild(el('dd', null, v)); }
  async function refreshStats() {
    let s;
    try { s = await (await fetch('/stats')).json(); } catch (e) { $('stats-time').textContent = `Unreachable: ${e.message}`; return; }
    const dl = $('stats-list');
    dl.replaceChildren();
    const mb = (b) => `${fmt(b / 1048576, 1)} MiB`;
    statsRow(dl, 'Model', s.model);
    statsRow(dl, 'Uptime', `${fmt(s.uptime_s, 0)} s`);
    if (s.requests) statsRow(dl, 'Requests', `${s.requests.served} served · ${s.requests.active} active · ${s.requests.queued} queued`);
    if (s.tokens) statsRow(dl, 'Tokens', `${s.tokens.prompt} prompt · ${s.tokens.generated} generated · ${s.tokens.cached} cached`);
    if (s.throughput) statsRow(dl, 'Throughput', `prefill ${fmt(s.throughput.prefill_tokens_per_s)} tok/s · decode ${fmt(s.throughput.decode_tokens_per_s)} tok/s`);
    if (s.kv_cache) statsRow(dl, 'KV cache', `${s.kv_cache.blocks_used} used · ${s.kv_cache.blocks_cached} cached · ${s.kv_cache.blocks_free} free of ${s.kv_cache.blocks_total} blocks (${mb(s.kv_cache.bytes)})`);
    if (s.ssd_cache) statsRow(dl, 'SSD cache', `${s.ssd_cache.blocks_written} written · ${s.ssd_cache.blocks_read} read · ${s.ssd_cache.quarantined} quarantined`);
    if (s.memory) statsRow(dl, 'Memory', `RSS ${mb(s.memory.rss_bytes)} · weights ${mb(s.memory.weights_bytes)}`);
    $('stats-time').textContent = `Updated ${new Date().toLocaleTimeString()}`;
  }
  function startStats() { refreshStats(); clearInterval(statsTimer); statsTimer = setInterval(refreshStats, 2000); }
  function stopStats() { clearInterval(statsTimer); statsTimer = null; }

  // ---- conversation list -----------------------------------------------------------

  function renderList() {
    const ul = $('conv-list');
    ul.replaceChildren();
    const sorted = [...convs].sort((a, b) => b.updated - a.updated);
    for (const c of sorted) {
      const li = el('li', 'conv' + (current && c.id === current.id ? ' active' : ''));
      li.dataset.id = c.id;
      const open = el('button', 'conv-open', c.title || 'New chat');
      open.type = 'button';
      if (current && c.id === current.id) open.setAttribute('aria-current', 'true');
      open.addEventListener('click', () => { openConv(c.id); drawer(false); $('input').focus(); });
      li.appendChild(open);
      const acts = el('span', 'conv-actions');
      const act = (label, text, fn) => {
        const b = el('button', 'mini', text);
        b.type = 'button'; b.setAttribute('aria-label', `${label} “${c.title}”`); b.title = label;
        b.addEventListener('click', fn); acts.appendChild(b); return b;
      };
      act('Rename', 'Rename', () => renameConv(c, li));
      act('Export as JSON', 'Export', () => download(`hearth-${slug(c.title)}.json`, c));
      const del = act('Delete', 'Delete', () => {
        if (del.dataset.armed) { deleteConv(c.id); return; }
        del.dataset.armed = '1'; del.textContent = 'Sure?'; del.setAttribute('aria-label', `Confirm deleting “${c.title}”`);
        setTimeout(() => { if (del.isConnected) { delete del.dataset.armed; del.textContent = 'Delete'; } }, 4000);
      });
      li.appendChild(acts);
      ul.appendChild(li);
    }
  }

  function renameConv(c, li) {
    const box = el('input', 'rename');
    box.value = c.title;
    box.setAttribute('aria-label', 'New name of the conversation');
    li.replaceChildren(box);
    box.focus(); box.select();
    let done = false;
    const finish = (save) => {
      if (done) return; done = true;
      if (save && box.value.trim()) { c.title = box.value.trim().slice(0, 120); saveConvs(); }
      renderList();
      document.querySelector(`.conv[data-id="${c.id}"] .conv-open`)?.focus();
    };
    box.addEventListener('keydown', (e) => {
      if (e.key === 'Enter') { e.preventDefault(); finish(true); }
      if (e.key === 'Escape') { e.preventDefault(); e.stopPropagation(); finish(false); }
    });
    box.addEventListener('blur', () => finish(true));
  }

  function deleteConv(id) {
    if (gen && gen.conv.id === id) stop();
    convs = convs.filter((c) => c.id !== id);
    saveConvs();
    if (current && current.id === id) { current = null; store(KEY_CURRENT, null); renderThread(); }
    renderList();
    toast('Conversation deleted');
  }

  function openConv(id) {
    if (gen) stop();
    current = convs.find((c) => c.id === id) || null;
    store(KEY_CURRENT, current ? current.id : null);
    renderList(); renderThread();
  }

  $('new-chat').addEventListener('click', () => {
    if (gen) stop();
    current = null; store(KEY_CURRENT, null);
    renderList(); renderThread(); drawer(false); $('input').focus();
  });
  $('export-all').addEventListener('click', () => download('hearth-conversations.json', { conversations: convs }));

  // ---- the thread -----------------------------------------------------------------

  function renderThread() {
    const ol = $('thread');
    ol.replaceChildren();
    const msgs = current ? current.messages : [];
    msgs.forEach((m, i) => ol.appendChild(messageNode(m, i)));
    $('empty').hidden = msgs.length > 0;
    scrollDown(true);
  }

  function scrollDown(force) {
    const box = $('messages');
    if (force || box.scrollHeight - box.scrollTop - box.clientHeight < 120) box.scrollTop = box.scrollHeight;
  }

  // Renders the body of message m into node (used while streaming too).
  function renderBody(m, body) {
    body.replaceChildren();
    if (m.role === 'user') {
      body.appendChild(el('p', 'plain', m.content));
      return;
    }
    const content = m.content || '';
    if (m.format === 'json' && content) {
      let label = 'JSON output';
      let text = content;
      try { text = JSON.stringify(JSON.parse(content), null, 2); label += ' · valid'; }
      catch { label += gen && gen.msg === m ? ' · streaming' : ' · not valid JSON'; }
      body.appendChild(HearthMarkdown.codeBlock(text, 'json', label));
    } else if (content) {
      const md = el('div', 'md');
      HearthMarkdown.render(content, md);
      body.appendChild(md);
    }
    for (const tc of m.tool_calls || []) {
      const card = el('div', 'tool-call');
      card.setAttribute('role', 'group');
      const name = tc.function?.name || '?';
      card.setAttribute('aria-label', `Tool call: ${name}`);
      const head = el('div', 'tool-head');
      head.appendChild(el('span', 'badge', 'Tool call'));
      head.appendChild(el('code', 'tool-name', name));
      if (tc.id) head.appendChild(el('span', 'muted', tc.id));
      card.appendChild(head);
      let args = tc.function?.arguments ?? '';
      try { args = JSON.stringify(JSON.parse(args), null, 2); } catch { /* shown as sent */ }
      card.appendChild(HearthMarkdown.codeBlock(args || '{}', 'json', 'arguments'));
      body.appendChild(card);
    }
    if (!content && !(m.tool_calls || []).length && !m.error) {
      body.appendChild(el('span', 'typing', gen && gen.msg === m ? 'Thinking…' : '(empty answer)'));
    }
    if (m.error) body.appendChild(el('p', 'error', m.error));
  }

  function metaText(m) {
    const parts = [];
    const s = m.stats;
    if (s) {
      if (s.ttft_ms != null) parts.push(`TTFT ${fmt(s.ttft_ms, 0)} ms`);
      if (s.tps != null) parts.push(`${fmt(s.tps, 1)} tok/s`);
      if (s.tokens != null) parts.push(`${s.tokens} tokens`);
    }
    if (m.finish === 'stopped') parts.push('stopped');
    else if (m.finish && m.finish !== 'stop') parts.push(`finish: ${m.finish}`);
    return parts.join(' · ');
  }

  function messageNode(m, i) {
    const li = el('li', `msg ${m.role}`);
    li.dataset.index = i;
    const who = m.role === 'user' ? 'You' : m.role === 'assistant' ? 'Assistant' : m.role;
    li.setAttribute('aria-label', `${who}, message ${i + 1}`);
    li.appendChild(el('div', 'who', who));
    const body = el('div', 'body');
    renderBody(m, body);
    li.appendChild(body);
    const foot = el('div', 'msg-foot');
    foot.appendChild(el('span', 'meta', metaText(m)));
    const acts = el('span', 'msg-actions');
    const act = (text, label, fn) => {
      const b = el('button', 'mini', text); b.type = 'button'; b.setAttribute('aria-label', label);
      b.addEventListener('click', fn); acts.appendChild(b); return b;
    };
    act('Copy', `Copy message ${i + 1}`, async () => toast((await copyText(m.content || '')) ? 'Copied' : 'Copy failed'));
    if (m.role === 'user') act('Edit', `Edit message ${i + 1}`, () => editMessage(i, li));
    const last = current && i === current.messages.length - 1;
    if (m.role === 'assistant' && last) act('Regenerate', 'Regenerate the answer', regenerate);
    foot.appendChild(acts);
    li.appendChild(foot);
    return li;
  }

  function editMessage(i, li) {
    if (gen) stop();
    const m = current.messages[i];
    const body = li.querySelector('.body');
    const form = el('div', 'edit');
    const ta = el('textarea');
    ta.value = m.content;
    ta.rows = Math.min(12, Math.max(2, m.content.split('\n').length));
    ta.setAttribute('aria-label', `Edit message ${i + 1}`);
    const save = el('button', 'btn primary', 'Save & send'); save.type = 'button';
    const cancel = el('button', 'btn ghost', 'Cancel'); cancel.type = 'button';
    const row = el('div', 'edit-row'); row.appendChild(save); row.appendChild(cancel);
    form.appendChild(ta); form.appendChild(row);
    body.replaceChildren(form);
    li.querySelector('.msg-foot').hidden = true;
    ta.focus();
    const commit = () => {
      const text = ta.value.trim();
      if (!text) return;
      m.content = text;
      current.messages.length = i + 1;
      current.updated = Date.now();
      saveConvs(); renderThread(); generate(current);
    };
    save.addEventListener('click', commit);
    cancel.addEventListener('click', () => renderThread());
    ta.addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) { e.preventDefault(); commit(); }
      if (e.key === 'Escape') { e.preventDefault(); e.stopPropagation(); renderThread(); }
    });
  }

  function regenerate() {
    if (gen || !current) return;
    const msgs = current.messages;
    if (msgs.length && msgs[msgs.length - 1].role === 'assistant') msgs.pop();
    if (!msgs.length) return;
    renderThread();
    generate(current);
  }

  // ---- sending and streaming --------------------------------------------------------

  function setBusy(busy) {
    $('send').hidden = busy;
    $('stop').hidden = !busy;
    $('messages').setAttribute('aria-busy', String(busy));
    document.body.classList.toggle('busy', busy);
  }

  function send() {
    const text = $('input').value.trim();
    if (!text || gen) return;
    if (!checkSettings()) { openPanel('settings', true); return; }
    if (!current) {
      current = { id: newId(), title: text.replace(/\s+/g, ' ').slice(0, 48), created: Date.now(), updated: Date.now(), messages: [] };
      convs.push(current);
      store(KEY_CURRENT, current.id);
    }
    current.messages.push({ role: 'user', content: text });
    current.updated = Date.now();
    $('input').value = '';
    autosize();
    saveConvs(); renderList(); renderThread();
    generate(current);
  }

  // Streams one answer to conv and appends it as an assistant message.
  async function generate(conv) {
    let body;
    try { body = requestBody(conv); } catch (e) { toast(e.message); return; }
    const m = { role: 'assistant', content: '' };
    if (body.response_format) m.format = 'json';
    conv.messages.push(m);
    const node = messageNode(m, conv.messages.length - 1);
    node.classList.add('streaming');
    $('thread').appendChild(node);
    $('empty').hidden = true;
    scrollDown(true);
    const ctrl = new AbortController();
    gen = { ctrl, conv, msg: m, node };
    setBusy(true);
    const t0 = performance.now();
    let tFirst = null, tLast = null, chunks = 0, usage = null, finish = null, frame = 0;
    const bodyNode = node.querySelector('.body');
    const paint = () => { frame = 0; renderBody(m, bodyNode); scrollDown(false); };
    const schedule = () => { if (!frame) frame = requestAnimationFrame(paint); };
    const calls = [];
    try {
      const r = await fetch('/v1/chat/completions', {
        method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body), signal: ctrl.signal,
      });
      if (!r.ok) {
        let msg = `HTTP ${r.status}`;
        try { msg = (await r.json()).error?.message || msg; } catch { /* not JSON */ }
        throw new Error(msg);
      }
      const reader = r.body.getReader();
      const dec = new TextDecoder();
      let buf = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true });
        let cut;
        while ((cut = buf.indexOf('\n\n')) >= 0) {
          const event = buf.slice(0, cut);
          buf = buf.slice(cut + 2);
          for (const line of event.split('\n')) {
            if (!line.startsWith('data:')) continue; // comments: keep-alives
            const data = line.slice(5).trim();
            if (data === '[DONE]') continue;
            const j = JSON.parse(data);
            if (j.error) throw new Error(j.error.message || 'error');
            if (j.usage) usage = j.usage;
            for (const ch of j.choices || []) {
              const d = ch.delta || {};
              if (d.content || d.tool_calls) {
                const now = performance.now();
                if (tFirst === null) tFirst = now;
                tLast = now; chunks++;
              }
              if (d.content) m.content += d.content;
              for (const tc of d.tool_calls || []) {
                const k = tc.index ?? calls.length;
                const c = calls[k] || (calls[k] = { id: tc.id, type: 'function', function: { name: '', arguments: '' } });
                if (tc.id) c.id = tc.id;
                if (tc.function?.name) c.function.name += tc.function.name;
                if (tc.function?.arguments) c.function.arguments += tc.function.arguments;
                m.tool_calls = calls.filter(Boolean);
              }
              if (ch.finish_reason) finish = ch.finish_reason;
            }
          }
          schedule();
        }
      }
      m.finish = finish || 'stop';
    } catch (e) {
      if (e.name === 'AbortError') m.finish = 'stopped';
      else { m.error = `Error: ${e.message}`; m.finish = 'error'; }
    }
    if (frame) cancelAnimationFrame(frame);
    const tokens = usage ? usage.completion_tokens : chunks;
    m.stats = {
      ttft_ms: tFirst === null ? null : tFirst - t0,
      tps: tFirst !== null && tLast > tFirst && tokens > 1 ? (tokens - 1) / ((tLast - tFirst) / 1000) : null,
      tokens,
    };
    gen = null;
    setBusy(false);
    conv.updated = Date.now();
    saveConvs();
    if (current === conv) {
      const fresh = messageNode(m, conv.messages.indexOf(m));
      node.replaceWith(fresh);
      renderList();
      scrollDown(false);
    }
    if (statsTimer) refreshStats();
  }

  function stop() {
    if (gen) gen.ctrl.abort();
  }

  // ---- composer and keys -------------------------------------------------------------

  function autosize() {
    const ta = $('input');
    ta.style.height = 'auto';
    ta.style.height = `${Math.min(ta.scrollHeight, 240)}px`;
  }
  $('input').addEventListener('input', autosize);
  $('input').addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) { e.preventDefault(); send(); }
  });
  $('composer').addEventListener('submit', (e) => { e.preventDefault(); send(); });
  $('stop').addEventListener('click', () => { stop(); $('input').focus(); });
  document.addEventListener('keydown', (e) => {
    if (e.key !== 'Escape') return;
    if (gen) { e.preventDefault(); stop(); return; }
    for (const n of Object.keys(panels)) if (!$(n).hidden) { openPanel(n, false); panels[n].focus(); return; }
    if (document.body.classList.contains('drawer-open')) { drawer(false); $('menu').focus(); }
  });
  // copy buttons of code blocks (in messages, rendered any time)
  $('thread').addEventListener('click', async (e) => {
    const b = e.target.closest('[data-copy]');
    if (!b) return;
    const code = b.closest('.code-block').querySelector('code').textContent;
    const ok = await copyText(code);
    b.textContent = ok ? 'Copied' : 'Failed';
    setTimeout(() => { b.textContent = 'Copy'; }, 1500);
  });

  // ---- start ---------------------------------------------------------------------------

  showSettings();
  const last = load(KEY_CURRENT, null);
  current = convs.find((c) => c.id === last) || null;
  renderList();
  renderThread();
  loadModels();
  $('input').focus();
})();
