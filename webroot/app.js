/*
 * ds4j playground: chat over the server's OpenAI-compatible SSE endpoint. Plain JavaScript, no build step.
 * Markdown goes through marked, then DOMPurify (model output never runs as script), code through highlight.js.
 */
(() => {
  'use strict';

  const $ = (id) => document.getElementById(id);
  const el = (tag, cls, text) => {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text != null) e.textContent = text;
    return e;
  };

  const KEY_SETTINGS = 'ds4j.playground.settings.v1';
  const KEY_CHAT = 'ds4j.playground.chat.v1';
  const KEY_UI = 'ds4j.playground.ui.v1';

  const ui = {
    messages: $('messages'), welcome: $('welcome'), prompt: $('prompt'), composer: $('composer'), send: $('send'), stop: $('stop'),
    thinking: $('thinking'), effort: $('effort'), hint: $('composer-hint'), settings: $('settings'), settingsToggle: $('settings-toggle'),
    backdrop: $('backdrop'), modelName: $('model-name'), statusDot: $('status-dot'), serverInfo: $('server-info'), propsJson: $('props-json'),
    welcomeFacts: $('welcome-facts'), welcomeNote: $('welcome-note'), specNote: $('spec-note'), themeLabel: $('theme-label'),
  };

  /** Settings fields: element id → request field and how to read it. */
  const FIELDS = [
    { id: 'temperature', key: 'temperature', type: 'float', def: 'temperature' },
    { id: 'top-p', key: 'top_p', type: 'float', def: 'top_p' },
    { id: 'top-k', key: 'top_k', type: 'int', def: 'top_k' },
    { id: 'min-p', key: 'min_p', type: 'float', def: 'min_p' },
    // the page's own default: the server's (4096) would make every answer of the random embedded model stream for long
    { id: 'max-tokens', key: 'max_tokens', type: 'int', def: 'max_tokens', pageDefault: 512 },
    { id: 'seed', key: 'seed', type: 'int', def: 'seed' },
  ];

  const state = {
    messages: [],
    busy: false,
    controller: null,
    props: null,
    modelId: null,
    charsPerToken: 4, // learned from finished answers; used only for the live tokens/s estimate
  };
  const views = new Map(); // message id → its DOM parts
  let nextId = Date.now();

  // ------------------------------------------------------------------------------------------ markdown

  const esc = (t) => String(t).replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]);
  marked.setOptions({ gfm: true, breaks: false });
  // images in model output become links: the page never fetches a URL the model wrote
  marked.use({ renderer: { image: (t) => '<a href="' + esc(t.href || '') + '">' + esc(t.text ? 'image: ' + t.text : 'image') + '</a>' } });
  DOMPurify.addHook('afterSanitizeAttributes', (node) => {
    if (node.tagName === 'A' && node.getAttribute('href')) {
      node.setAttribute('target', '_blank');
      node.setAttribute('rel', 'noopener noreferrer nofollow');
    }
  });
  if (window.hljs) hljs.configure({ ignoreUnescapedHTML: true });

  /** Markdown → sanitised HTML in the given element; code blocks highlighted. */
  function renderMarkdown(target, text, copyButtons) {
    const html = DOMPurify.sanitize(marked.parse(text || ''), { USE_PROFILES: { html: true },
      FORBID_TAGS: ['style', 'img', 'picture', 'video', 'audio', 'source', 'form', 'input', 'button', 'textarea', 'select'] });
    target.innerHTML = html;
    target.querySelectorAll('pre code').forEach((c) => {
      if (window.hljs) {
        try { hljs.highlightElement(c); } catch (e) { /* leave it plain */ }
      }
      if (copyButtons) {
        const b = el('button', 'code-copy', 'Copy');
        b.type = 'button';
        b.title = 'Copy this code';
        b.addEventListener('click', () => copyText(c.textContent, b));
        c.parentElement.append(b);
      }
    });
  }

  // ------------------------------------------------------------------------------------------ persistence

  function load(key, fallback) {
    try {
      const v = localStorage.getItem(key);
      return v ? JSON.parse(v) : fallback;
    } catch (e) {
      return fallback;
    }
  }
  function save(key, value) {
    try { localStorage.setItem(key, JSON.stringify(value)); } catch (e) { /* private mode or full */ }
  }

  function saveSettings() {
    const s = { system: $('system-prompt').value, stop: $('stop-strings').value, ignoreEos: $('ignore-eos').checked,
      prediction: $('prediction').value,
      specQ: $('spec-q').value, apiKey: $('api-key').value, thinking: ui.thinking.checked, effort: ui.effort.value,
      charsPerToken: state.charsPerToken };
    for (const f of FIELDS) s[f.id] = $(f.id).value;
    save(KEY_SETTINGS, s);
  }
  function restoreSettings() {
    const s = load(KEY_SETTINGS, null);
    if (!s) return;
    $('system-prompt').value = s.system || '';
    $('stop-strings').value = s.stop || '';
    $('ignore-eos').checked = !!s.ignoreEos;
    $('prediction').value = s.prediction || '';
    $('spec-q').value = s.specQ || '';
    $('api-key').value = s.apiKey || '';
    ui.thinking.checked = !!s.thinking;
    ui.effort.value = s.effort === 'max' ? 'max' : 'high';
    if (s.charsPerToken > 0.5 && s.charsPerToken < 20) state.charsPerToken = s.charsPerToken;
    for (const f of FIELDS) if (s[f.id] != null) $(f.id).value = s[f.id];
  }
  function saveChat() {
    save(KEY_CHAT, state.messages.map((m) => {
      const c = Object.assign({}, m);
      delete c.live;
      return c;
    }));
  }

  // ------------------------------------------------------------------------------------------ server info

  function authHeaders() {
    const k = $('api-key').value.trim();
    return k ? { Authorization: 'Bearer ' + k } : {};
  }

  let propsTimer = null;
  async function fetchProps() {
    clearTimeout(propsTimer);
    let r;
    try {
      r = await fetch('/props', { headers: authHeaders(), cache: 'no-store' });
    } catch (e) {
      setStatus('error', 'server unreachable');
      showServerInfo([['status', 'unreachable: ' + e.message]]);
      propsTimer = setTimeout(fetchProps, 5000);
      return;
    }
    const text = await r.text();
    let j = null;
    try { j = JSON.parse(text); } catch (e) { /* shown below */ }
    if (r.status === 401) {
      setStatus('error', 'API key needed');
      showServerInfo([['status', 'this server needs an API key: enter it under Access']]);
      return;
    }
    if (!r.ok || !j) {
      const msg = j && j.error ? j.error.message : text || r.statusText;
      setStatus(r.status === 503 ? 'loading' : 'error', r.status === 503 ? 'model loading…' : 'error');
      showServerInfo([['status', 'HTTP ' + r.status + ': ' + msg]]);
      propsTimer = setTimeout(fetchProps, r.status === 503 ? 2000 : 10000);
      return;
    }
    applyProps(j);
    if (j.status !== 'ready') propsTimer = setTimeout(fetchProps, 2000);
  }

  function setStatus(status, label) {
    ui.statusDot.dataset.status = status;
    ui.modelName.textContent = label;
  }

  function showServerInfo(rows) {
    ui.serverInfo.replaceChildren();
    for (const [k, v] of rows) {
      ui.serverInfo.append(el('dt', null, k), el('dd', null, v == null ? '—' : String(v)));
    }
  }

  function fmtNum(v) {
    if (v == null) return '—';
    if (typeof v === 'number' && !Number.isInteger(v)) return String(Math.round(v * 1000) / 1000);
    return String(v);
  }

  function applyProps(p) {
    state.props = p;
    const m = p.model || {};
    state.modelId = m.id || null;
    setStatus(p.status === 'ready' ? 'ready' : p.status === 'loading' ? 'loading' : 'error', m.id || p.status);
    ui.statusDot.parentElement.title = 'Model ' + (m.id || '?') + ' — ' + p.status + ' (from /props)';
    const g = p.default_generation_settings || {};
    const spec = p.speculative || {};
    const lim = p.limits || {};
    // server defaults as placeholders: an empty field means "use the server's value"
    for (const f of FIELDS) {
      const v = g[f.def];
      $(f.id).placeholder = f.pageDefault != null ? f.pageDefault + ' (server: ' + (v == null ? '?' : v) + ')'
        : v == null ? (f.id === 'seed' ? 'random' : '') : String(v);
    }
    const defOpt = $('spec-q').querySelector('option[value=""]');
    defOpt.textContent = 'server default (' + (spec.q ?? '?') + ')';
    ui.specNote.textContent = 'Draft source: ' + (spec.draft ?? '?') + '. Acceptance rate and tokens committed per step are shown under each answer.'
      + (spec.draft === 'none' ? ' This server runs without a draft, so every step commits one token.' : '');
    showServerInfo([
      ['status', p.status],
      ['model', m.id], ['path', m.path], ['backend', p.backend],
      ['layers · hidden', m.n_layers != null ? m.n_layers + ' · ' + m.n_embd : null],
      ['experts', m.n_experts],
      // the checkpoint's rows and the tokenizer's ids (top_k's bound) can differ: both are shown where they do
      ['vocabulary', m.n_vocab != null && m.n_vocab_tokenizer != null && m.n_vocab_tokenizer !== m.n_vocab
        ? m.n_vocab + ' rows · tokenizer ' + m.n_vocab_tokenizer : m.n_vocab],
      ['context', lim.n_ctx != null ? lim.n_ctx + ' tokens' : null],
      ['draft · q', (spec.draft ?? '?') + ' · ' + (spec.q ?? '?')],
      ['max active · queue', lim.maxActive != null ? lim.maxActive + ' · ' + lim.maxQueue : null],
      ['prefill chunk', lim.prefillChunk],
      ['defaults', 'temp ' + fmtNum(g.temperature) + ', top-p ' + fmtNum(g.top_p) + ', top-k ' + fmtNum(g.top_k) + ', min-p ' + fmtNum(g.min_p)
        + ', max ' + fmtNum(g.max_tokens) + ', seed ' + (g.seed == null ? 'random' : g.seed)],
      ['running · waiting', p.load ? p.load.running + ' · ' + p.load.waiting : null],
      ['build', p.build_info],
    ]);
    ui.propsJson.textContent = JSON.stringify(p, null, 2);
    // welcome card
    ui.welcomeFacts.replaceChildren();
    const fact = (k, v) => {
      if (v == null) return;
      const d = el('div');
      d.append(el('dt', null, k), el('dd', null, String(v)));
      ui.welcomeFacts.append(d);
    };
    fact('model', m.id);
    fact('backend', p.backend);
    fact('context', lim.n_ctx != null ? lim.n_ctx.toLocaleString('en') + ' tokens' : null);
    fact('speculative', (spec.draft ?? '?') + ', q ' + (spec.q ?? '?'));
    ui.welcomeNote.hidden = !m.note;
    ui.welcomeNote.textContent = m.note ? 'Note: ' + m.note + '.' : '';
    const eff = (p.capabilities && p.capabilities.reasoning_efforts) || [];
    ui.effort.querySelector('option[value="max"]').disabled = eff.length > 0 && !eff.includes('max');
    refreshWho();
  }

  function refreshWho() {
    for (const m of state.messages) if (m.role === 'assistant') {
      const v = views.get(m.id);
      if (v && !m.model && state.modelId) v.who.firstChild.textContent = state.modelId;
    }
  }

  // ------------------------------------------------------------------------------------------ rendering

  function renderAll() {
    for (const v of views.values()) v.root.remove();
    views.clear();
    ui.welcome.hidden = state.messages.length > 0;
    state.messages.forEach((m) => ui.messages.append(buildMessage(m)));
    updateControls();
    scrollToBottom(true);
  }

  function lastIndex(role) {
    for (let i = state.messages.length - 1; i >= 0; i--) if (state.messages[i].role === role) return i;
    return -1;
  }

  function buildMessage(m) {
    const root = el('article', 'msg ' + m.role);
    root.dataset.id = m.id;
    const v = { root };
    views.set(m.id, v);
    if (m.role === 'user') {
      root.append(el('div', 'who', 'You'));
      v.bubble = el('div', 'bubble', m.content);
      root.append(v.bubble);
      v.actions = el('div', 'actions');
      root.append(v.actions);
      return root;
    }
    v.who = el('div', 'who');
    v.who.append(el('span', null, m.model || state.modelId || 'assistant'));
    if (m.thinking) v.who.append(el('span', 'chip', 'thinking · ' + m.effort));
    root.append(v.who);
    v.bubble = el('div', 'bubble');
    v.reasoningSlot = el('div');
    v.answer = el('div', 'answer md');
    v.tools = el('div', 'tool-calls');
    v.notice = el('div', 'notice');
    v.error = el('div', 'error-box');
    v.stats = el('div', 'stats');
    v.bubble.append(v.reasoningSlot, v.answer, v.tools, v.notice, v.error, v.stats);
    root.append(v.bubble);
    v.actions = el('div', 'actions');
    root.append(v.actions);
    updateAssistant(m, true);
    return root;
  }

  function updateControls() {
    const lu = lastIndex('user');
    const la = lastIndex('assistant');
    state.messages.forEach((m, i) => {
      const v = views.get(m.id);
      if (!v || !v.actions) return;
      v.actions.replaceChildren();
      if (m.role === 'user' && i === lu && !state.busy) {
        const b = el('button', null, 'Edit');
        b.type = 'button';
        b.title = 'Edit this message and send it again';
        b.className = 'edit-btn';
        b.addEventListener('click', () => startEdit(m));
        v.actions.append(b);
      }
      if (m.role === 'assistant' && m.state !== 'streaming') {
        if (m.content || m.reasoning) {
          const c = el('button', null, 'Copy');
          c.type = 'button';
          c.title = 'Copy the answer as Markdown';
          c.addEventListener('click', () => copyText(m.content || m.reasoning, c));
          v.actions.append(c);
        }
        if (i === la && i === state.messages.length - 1 && !state.busy) {
          const r = el('button', null, 'Regenerate');
          r.type = 'button';
          r.title = 'Ask again for a new answer';
          r.addEventListener('click', regenerate);
          v.actions.append(r);
        }
      }
    });
    ui.send.hidden = state.busy;
    ui.stop.hidden = !state.busy;
    ui.hint.textContent = state.busy ? 'generating… Esc stops' : 'Enter sends · Shift+Enter new line';
    document.body.dataset.busy = String(state.busy);
    ui.effort.disabled = !ui.thinking.checked;
  }

  let renderTimer = null;
  const dirty = new Set();
  /** Re-renders a streaming message at most every 40 ms (less often for long answers: Markdown is parsed whole). */
  function scheduleUpdate(m) {
    dirty.add(m);
    if (renderTimer) return;
    const size = (m.content || '').length + (m.reasoning || '').length;
    renderTimer = setTimeout(() => {
      renderTimer = null;
      const stick = nearBottom();
      for (const x of dirty) updateAssistant(x, false);
      dirty.clear();
      if (stick) scrollToBottom(false);
    }, Math.min(250, 40 + size / 200));
  }

  function updateAssistant(m, first) {
    const v = views.get(m.id);
    if (!v) return;
    v.root.dataset.state = m.state;
    const streaming = m.state === 'streaming';
    v.root.setAttribute('aria-busy', String(streaming));
    // reasoning block
    if (m.reasoning && !v.reasoning) {
      v.reasoning = el('details', 'reasoning');
      v.reasoningSummary = el('summary');
      v.reasoningSpinner = el('span', 'spinner');
      v.reasoningLabel = el('span');
      v.reasoningSummary.append(v.reasoningSpinner, v.reasoningLabel);
      v.reasoningBody = el('div', 'reasoning-body md');
      v.reasoning.append(v.reasoningSummary, v.reasoningBody);
      v.reasoning.open = streaming && !m.content;
      v.reasoningSummary.addEventListener('click', () => { v.reasoningTouched = true; });
      v.reasoningSlot.append(v.reasoning);
    }
    if (v.reasoning) {
      const thinkingNow = streaming && !m.content;
      v.reasoningSpinner.hidden = !thinkingNow;
      const secs = m.live && m.live.reasonEnd ? (m.live.reasonEnd - m.live.reasonStart) / 1000 : m.reasonSeconds;
      v.reasoningLabel.textContent = thinkingNow ? 'Thinking…'
        : 'Reasoning' + (secs != null ? ' · ' + secs.toFixed(1) + ' s' : '') + ' · ' + m.reasoning.length.toLocaleString('en') + ' characters';
      if (v.shownReasoning !== m.reasoning) {
        renderMarkdown(v.reasoningBody, m.reasoning);
        v.shownReasoning = m.reasoning;
      }
      if (m.content && !v.reasoningTouched && v.reasoning.open && streaming) v.reasoning.open = false;
      if (thinkingNow && v.reasoningBody.scrollHeight > v.reasoningBody.clientHeight) v.reasoningBody.scrollTop = v.reasoningBody.scrollHeight;
    }
    // answer
    if (m.content) {
      if (v.shownContent !== m.content || v.shownFinal !== !streaming) {
        renderMarkdown(v.answer, m.content, !streaming);
        v.shownContent = m.content;
        v.shownFinal = !streaming;
      }
    } else if (streaming && !m.reasoning) {
      let w = v.answer.querySelector('.waiting');
      if (!w) {
        w = el('span', 'waiting');
        w.append(el('span', 'spinner'), el('span'));
        v.answer.replaceChildren(w);
      }
      w.lastChild.textContent = m.live && m.live.headers ? 'processing the prompt…' : 'waiting for the server…';
    } else {
      v.answer.replaceChildren();
      v.shownContent = null;
    }
    v.answer.classList.toggle('cursor', streaming && !!m.content);
    // tool calls (not requested by this page, but shown if a server sends them)
    v.tools.replaceChildren();
    if (m.toolCalls && m.toolCalls.length) {
      for (const t of m.toolCalls) {
        const pre = el('pre');
        pre.append(el('code', null, (t.name || '?') + '(' + (t.arguments || '') + ')'));
        v.tools.append(pre);
      }
    }
    // finish notes
    let note = '';
    if (m.state === 'stopped') note = 'Stopped. The server cancels the request when the connection closes.';
    else if (m.finish === 'length') note = 'Reached the token limit (finish_reason: length).';
    else if (m.stopReason) note = 'Ended at stop string “' + m.stopReason + '”.';
    else if (m.state === 'done' && !m.content && !m.reasoning && !(m.toolCalls && m.toolCalls.length)) note = 'The model returned an empty answer.';
    v.notice.textContent = note;
    v.notice.hidden = !note;
    // errors, shown as the server sent them
    v.error.replaceChildren();
    v.error.hidden = !m.error;
    if (m.error) {
      v.error.append(el('strong', null, m.error.title));
      if (m.error.message) v.error.append(document.createTextNode(' — ' + m.error.message));
      if (m.error.hint) v.error.append(document.createTextNode('\n' + m.error.hint));
    }
    updateStats(m, v);
  }

  // ------------------------------------------------------------------------------------------ stats and chart

  function chip(label, value, title) {
    const c = el('span', 'chip');
    if (title) c.title = title;
    c.append(document.createTextNode(label ? label + ' ' : ''));
    c.append(el('b', null, value));
    return c;
  }
  const fmt = (x, d = 1) => (x == null || !Number.isFinite(x) ? '—' : x.toFixed(d));
  const fmtMs = (ms) => (ms == null || !Number.isFinite(ms) ? '—' : ms < 1000 ? Math.round(ms) + ' ms' : (ms / 1000).toFixed(2) + ' s');

  function updateStats(m, v) {
    const live = m.live;
    if (!v.chartWrap) {
      v.chartWrap = el('span', 'chart-wrap');
      v.canvas = el('canvas');
      v.canvas.setAttribute('role', 'img');
      v.canvas.setAttribute('aria-label', 'tokens per second over time');
      v.chartWrap.append(v.canvas);
    }
    v.stats.replaceChildren();
    v.stats.dataset.final = String(!!m.usage);
    const series = m.series || [];
    const chart = () => {
      if (series.length < 2) return;
      const peak = Math.max(...series.map((p) => p[1]));
      v.chartWrap.title = 'Output tokens per second over the answer (peak ' + fmt(peak, 0) + ' tok/s'
        + (m.state === 'streaming' ? ', live estimate)' : m.usage ? ', scaled to the exact token count)' : ', estimated from the text)');
      v.stats.append(v.chartWrap);
      drawChart(v.canvas, series);
    };
    if (m.usage) {
      const u = m.usage;
      const t = u.timings || {};
      v.stats.append(chip('TTFT', fmtMs(t.ttft_ms), 'time to first token: parsing, tokenising, queueing and prefill' + (t.queue_ms != null ? ' (queue ' + fmtMs(t.queue_ms) + ')' : '')));
      v.stats.append(chip('prefill', fmt(t.prompt_per_second) + ' tok/s', (t.prompt_n ?? u.prompt_tokens) + ' prompt tokens in ' + fmtMs(t.prompt_ms)));
      v.stats.append(chip('decode', fmt(t.predicted_per_second) + ' tok/s', 'tokens per second after the first one; ' + fmtMs(t.predicted_ms) + ' of decoding'));
      chart();
      v.stats.append(chip('tokens', u.prompt_tokens + ' → ' + u.completion_tokens, 'prompt tokens → generated tokens'));
      const acc = t.draft_acceptance_rate;
      v.stats.append(chip('accept', acc == null ? 'n/a' : Math.round(acc * 100) + '%',
        acc == null ? 'draft acceptance: no draft tokens were offered' : 'draft acceptance: ' + t.draft_n_accepted + ' of ' + t.draft_n + ' draft tokens accepted'));
      const pd = u.completion_tokens_details || {};
      if (m.predicted) v.stats.append(chip('predicted', (pd.accepted_prediction_tokens ?? 0) + ' / ' + (pd.rejected_prediction_tokens ?? 0),
        'predicted output: prediction tokens accepted / rejected by the verifier'));
      v.stats.append(chip('', fmt(t.mean_committed_per_step, 2) + ' tok/step', 'mean tokens committed per verify step over ' + (t.verify_steps ?? '?') + ' steps'));
    } else if (m.state === 'streaming' && live) {
      const now = performance.now();
      if (!live.firstToken) {
        v.stats.append(chip('waiting', ((now - live.start) / 1000).toFixed(1) + ' s', 'time since the request was sent'));
      } else {
        v.stats.append(chip('TTFT', fmtMs(live.firstToken - live.start), 'measured by the page'));
        v.stats.append(chip('', '≈ ' + fmt(live.rate || 0, 0) + ' tok/s', 'live estimate from the streamed text'));
        chart();
        v.stats.append(chip('', '≈ ' + Math.round(estTokens(m)) + ' tokens', 'estimated from the text until the exact count arrives'));
        v.stats.append(chip('', ((now - live.firstToken) / 1000).toFixed(1) + ' s'));
      }
    } else if (m.client) {
      const c = m.client;
      if (c.ttftMs != null) v.stats.append(chip('TTFT', fmtMs(c.ttftMs), 'measured by the page'));
      chart();
      if (c.tokensEst != null) v.stats.append(chip('', '≈ ' + Math.round(c.tokensEst) + ' tokens', 'estimated from the text; the server sends exact counts only with a finished answer'));
      if (c.seconds != null) v.stats.append(chip('', c.seconds.toFixed(1) + ' s'));
    }
    v.stats.hidden = !v.stats.childElementCount;
  }

  function estTokens(m) {
    return ((m.content || '').length + (m.reasoning || '').length + toolChars(m)) / state.charsPerToken;
  }
  const toolChars = (m) => (m.toolCalls || []).reduce((a, t) => a + (t.arguments || '').length + (t.name || '').length, 0);

  /** Draws a small area chart of [seconds, tokens/s] points. */
  function drawChart(canvas, series) {
    const dpr = window.devicePixelRatio || 1;
    const w = 96, h = 22;
    if (canvas.width !== w * dpr) { canvas.width = w * dpr; canvas.height = h * dpr; }
    const g = canvas.getContext('2d');
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, w, h);
    const cs = getComputedStyle(document.documentElement);
    const tMin = series[0][0];
    const tSpan = Math.max(series[series.length - 1][0] - tMin, 1e-3);
    const yMax = Math.max(...series.map((p) => p[1]), 1) * 1.15;
    const x = (t) => 2 + ((t - tMin) / tSpan) * (w - 4);
    const y = (r) => h - 2 - (r / yMax) * (h - 5);
    g.beginPath();
    g.moveTo(x(series[0][0]), h - 1);
    for (const p of series) g.lineTo(x(p[0]), y(p[1]));
    g.lineTo(x(series[series.length - 1][0]), h - 1);
    g.closePath();
    g.fillStyle = cs.getPropertyValue('--chart-fill').trim() || 'rgba(79,107,237,.15)';
    g.fill();
    g.beginPath();
    series.forEach((p, i) => (i ? g.lineTo(x(p[0]), y(p[1])) : g.moveTo(x(p[0]), y(p[1]))));
    g.strokeStyle = cs.getPropertyValue('--chart').trim() || '#4f6bed';
    g.lineWidth = 1.5;
    g.lineJoin = 'round';
    g.stroke();
  }

  /** Every 250 ms while streaming: a tokens/s point (rate over the last second) for the chart. */
  function sample(m) {
    const live = m.live;
    if (!live) return;
    if (!live.firstToken) {
      scheduleUpdate(m); // the "waiting" figure
      return;
    }
    const now = performance.now();
    const est = estTokens(m);
    live.hist.push([now, est]);
    while (live.hist.length > 2 && now - live.hist[0][0] > 1000) live.hist.shift();
    const [t0, e0] = live.hist[0];
    const rate = now > t0 ? ((est - e0) * 1000) / (now - t0) : 0;
    live.rate = rate;
    m.series.push([(now - live.firstToken) / 1000, Math.max(0, rate)]);
    if (m.series.length > 600) m.series = m.series.filter((_, i) => i % 2 === 0);
    scheduleUpdate(m);
  }

  // ------------------------------------------------------------------------------------------ requests

  /**
   * The stop strings of the settings' field: one per line, with \n in a line for a newline within the stop, \t for a
   * tab and \\ for a backslash (a line break itself separates two stops); empty lines are dropped.
   */
  function stopStrings(text) {
    return text.split('\n').filter((s) => s.length > 0)
      .map((s) => s.replace(/\\([\\nt])/g, (_, c) => (c === 'n' ? '\n' : c === 't' ? '\t' : '\\')));
  }

  function buildRequest(history, m) {
    const body = { stream: true, stream_options: { include_usage: true }, messages: [] };
    const sys = $('system-prompt').value.trim();
    if (sys) body.messages.push({ role: 'system', content: sys });
    for (const x of history) {
      if (x.role === 'user') body.messages.push({ role: 'user', content: x.content });
      // every assistant turn is sent, one with no text too (only reasoning, only tool calls, or an error or stop before
      // any text) as content "": left out, the request would have two user messages in a row. Its tool calls are not
      // sent back, since the page offers no tools and so has no results to answer them with
      else if (x.role === 'assistant') body.messages.push({ role: 'assistant', content: x.content || '' });
    }
    body.reasoning_effort = m.thinking ? m.effort : 'none';
    for (const f of FIELDS) {
      const raw = $(f.id).value.trim();
      if (raw === '') {
        if (f.pageDefault != null) body[f.key] = f.pageDefault;
        continue;
      }
      const n = Number(raw);
      body[f.key] = Number.isFinite(n) ? n : raw; // a bad value goes through and the server names it
    }
    const stops = stopStrings($('stop-strings').value);
    if (stops.length) body.stop = stops;
    if ($('ignore-eos').checked) body.ignore_eos = true;
    const q = $('spec-q').value;
    if (q !== '') body.speculative_q = q === 'auto' ? 'auto' : Number(q);
    const prediction = $('prediction').value;
    if (prediction.length > 0) body.prediction = { type: 'content', content: prediction };
    return body;
  }

  /** Yields the data payload of each Server-Sent Event of a fetch body. */
  async function* sseData(body) {
    const reader = body.getReader();
    const dec = new TextDecoder();
    let buf = '';
    let data = [];
    const lines = function* (final) {
      let i;
      while ((i = buf.indexOf('\n')) >= 0 || (final && buf.length)) {
        let line;
        if (i >= 0) { line = buf.slice(0, i); buf = buf.slice(i + 1); } else { line = buf; buf = ''; }
        if (line.endsWith('\r')) line = line.slice(0, -1);
        yield line;
      }
    };
    const take = (line) => {
      if (line === '') {
        if (!data.length) return null;
        const d = data.join('\n');
        data = [];
        return d;
      }
      if (line.startsWith('data:')) data.push(line.slice(line.startsWith('data: ') ? 6 : 5));
      return null; // comments (":") and other fields are ignored
    };
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true });
        for (const line of lines(false)) {
          const d = take(line);
          if (d != null) yield d;
        }
      }
      buf += dec.decode();
      for (const line of lines(true)) {
        const d = take(line);
        if (d != null) yield d;
      }
      if (data.length) yield data.join('\n');
    } finally {
      reader.releaseLock();
    }
  }

  function httpError(status, statusText, text, headers) {
    let j = null;
    try { j = JSON.parse(text); } catch (e) { /* not JSON */ }
    const e = j && j.error;
    const err = { title: 'HTTP ' + status + (statusText ? ' ' + statusText : '') + (e && e.code ? ' · ' + e.code : ''),
      message: e ? e.message + (e.param && !String(e.message).startsWith(e.param) ? ' (param: ' + e.param + ')' : '') : (text || '').trim().slice(0, 2000) };
    if (status === 401) err.hint = 'Enter the server\'s API key under Settings → Access.';
    else if (status === 429) err.hint = 'The server\'s queue is full' + (headers.get('retry-after') ? '; try again in ' + headers.get('retry-after') + ' s.' : '.');
    else if (status === 503) err.hint = 'The server is not ready' + (headers.get('retry-after') ? '; try again in ' + headers.get('retry-after') + ' s.' : '.');
    return err;
  }

  async function generate(m) {
    const history = state.messages.slice(0, state.messages.indexOf(m));
    const body = buildRequest(history, m);
    m.predicted = !!body.prediction;
    const controller = new AbortController();
    state.controller = controller;
    state.busy = true;
    m.live = { start: performance.now(), hist: [], rate: 0, firstToken: null, headers: false, reasonStart: null, reasonEnd: null };
    m.series = [];
    updateControls();
    const timer = setInterval(() => sample(m), 250);
    let sawDone = false;
    try {
      const r = await fetch('/v1/chat/completions', {
        method: 'POST', signal: controller.signal, cache: 'no-store',
        headers: Object.assign({ 'Content-Type': 'application/json', Accept: 'text/event-stream' }, authHeaders()),
        body: JSON.stringify(body),
      });
      m.live.headers = true;
      if (!r.ok) {
        const text = await r.text();
        m.error = httpError(r.status, r.statusText, text, r.headers);
        m.state = 'error';
        return;
      }
      scheduleUpdate(m);
      for await (const data of sseData(r.body)) {
        if (data === '[DONE]') { sawDone = true; break; }
        let j;
        try { j = JSON.parse(data); } catch (e) {
          m.error = { title: 'Unreadable event from the server', message: data.slice(0, 500) };
          m.state = 'error';
          break;
        }
        if (j.error) {
          const e = j.error;
          m.error = { title: 'Error during generation' + (e.code ? ' · ' + e.code : e.type ? ' · ' + e.type : ''), message: e.message || JSON.stringify(e) };
          m.state = 'error';
          break;
        }
        if (j.usage) m.usage = j.usage;
        for (const c of j.choices || []) {
          const d = c.delta || {};
          const rs = d.reasoning_content ?? d.reasoning;
          const now = performance.now();
          if (rs) {
            if (m.live.reasonStart == null) m.live.reasonStart = now;
            m.reasoning += rs;
          }
          if (d.content) {
            if (m.reasoning && m.live.reasonEnd == null) m.live.reasonEnd = now;
            m.content += d.content;
          }
          if (d.tool_calls) {
            m.toolCalls = m.toolCalls || [];
            for (const t of d.tool_calls) {
              const i = t.index ?? 0;
              m.toolCalls[i] = m.toolCalls[i] || { name: '', arguments: '' };
              if (t.function && t.function.name) m.toolCalls[i].name = t.function.name;
              if (t.function && t.function.arguments) m.toolCalls[i].arguments += t.function.arguments;
            }
          }
          if ((rs || d.content || d.tool_calls) && !m.live.firstToken) {
            m.live.firstToken = now;
            m.live.hist.push([now, 0]);
          }
          if (c.finish_reason) m.finish = c.finish_reason;
          if (c.stop_reason) m.stopReason = c.stop_reason;
        }
        scheduleUpdate(m);
      }
      if (m.state === 'streaming') {
        if (sawDone) m.state = 'done';
        else {
          m.state = 'error';
          m.error = { title: 'The stream ended early', message: 'the connection closed before the server sent [DONE]' };
        }
      }
    } catch (e) {
      if (controller.signal.aborted) {
        m.state = 'stopped';
      } else {
        m.state = 'error';
        m.error = { title: m.live.headers ? 'The connection broke' : 'Cannot reach the server', message: String(e && e.message || e) };
      }
    } finally {
      clearInterval(timer);
      finishMessage(m);
    }
  }

  function finishMessage(m) {
    const live = m.live;
    if (live) {
      sample(m);
      const now = performance.now();
      if (m.reasoning && live.reasonStart != null) m.reasonSeconds = ((live.reasonEnd ?? now) - live.reasonStart) / 1000;
      m.client = { ttftMs: live.firstToken ? live.firstToken - live.start : null, tokensEst: estTokens(m),
        seconds: (now - live.start) / 1000 };
      // exact counts arrived: rescale the live estimate and learn characters per token for next time
      const n = m.usage && m.usage.completion_tokens;
      if (n) {
        const chars = (m.content || '').length + (m.reasoning || '').length + toolChars(m);
        const est = chars / state.charsPerToken;
        if (est > 0 && m.series.length) {
          const k = n / est;
          m.series = m.series.map(([t, r]) => [t, r * k]);
        }
        if (n >= 8 && chars > 0) state.charsPerToken = 0.5 * state.charsPerToken + 0.5 * (chars / n);
      }
    }
    delete m.live;
    const refocus = document.activeElement === ui.stop || document.activeElement === document.body;
    state.busy = false;
    state.controller = null;
    dirty.delete(m);
    updateAssistant(m, false);
    updateControls();
    if (refocus) ui.prompt.focus();
    scrollToBottom(false);
    saveChat();
    saveSettings();
    if (state.props) fetchProps(); // running / waiting figures
  }

  function startAssistant() {
    const m = { id: 'm' + nextId++, role: 'assistant', content: '', reasoning: '', state: 'streaming', model: state.modelId,
      thinking: ui.thinking.checked, effort: ui.effort.value };
    state.messages.push(m);
    ui.welcome.hidden = true;
    ui.messages.append(buildMessage(m));
    updateControls();
    scrollToBottom(true);
    saveChat();
    generate(m);
  }

  function send() {
    if (state.busy) {
      // Send while a reply streams does nothing; say so instead of silently ignoring the key
      ui.hint.textContent = 'a reply is streaming; Stop it or wait';
      ui.hint.classList.add('attention');
      clearTimeout(send.hintTimer);
      send.hintTimer = setTimeout(() => {
        ui.hint.classList.remove('attention');
        if (state.busy) ui.hint.textContent = 'generating… Esc stops';
      }, 2500);
      return;
    }
    const text = ui.prompt.value;
    if (!text.trim()) {
      ui.prompt.focus();
      return;
    }
    const u = { id: 'm' + nextId++, role: 'user', content: text };
    state.messages.push(u);
    ui.welcome.hidden = true;
    ui.messages.append(buildMessage(u));
    ui.prompt.value = '';
    autoGrow();
    startAssistant();
  }

  function stop() {
    if (state.controller) state.controller.abort();
  }

  function regenerate() {
    if (state.busy) return;
    const last = state.messages[state.messages.length - 1];
    if (!last || last.role !== 'assistant') return;
    state.messages.pop();
    const v = views.get(last.id);
    if (v) v.root.remove();
    views.delete(last.id);
    startAssistant();
  }

  function startEdit(m) {
    if (state.busy) return;
    const v = views.get(m.id);
    if (!v || v.editing) return;
    v.editing = true;
    const box = el('div', 'edit-box');
    const ta = el('textarea');
    ta.value = m.content;
    ta.setAttribute('aria-label', 'Edit message');
    const row = el('div', 'row');
    const cancel = el('button', 'btn small', 'Cancel');
    cancel.type = 'button';
    const ok = el('button', 'btn primary small', 'Send');
    ok.type = 'button';
    row.append(cancel, ok);
    box.append(ta, row);
    v.bubble.replaceWith(box);
    v.actions.hidden = true;
    const close = () => {
      v.editing = false;
      box.replaceWith(v.bubble);
      v.actions.hidden = false;
    };
    const submit = () => {
      if (state.busy || !ta.value.trim()) return;
      m.content = ta.value;
      v.bubble.textContent = m.content;
      close();
      // drop everything after the edited message, then ask again
      const i = state.messages.indexOf(m);
      for (const x of state.messages.splice(i + 1)) {
        const xv = views.get(x.id);
        if (xv) xv.root.remove();
        views.delete(x.id);
      }
      startAssistant();
    };
    cancel.addEventListener('click', close);
    ok.addEventListener('click', submit);
    ta.addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) { e.preventDefault(); submit(); }
      if (e.key === 'Escape') { e.preventDefault(); close(); }
    });
    ta.focus();
    ta.setSelectionRange(ta.value.length, ta.value.length);
  }

  function newChat() {
    stop();
    state.messages = [];
    renderAll();
    saveChat();
    ui.prompt.focus();
  }

  async function copyText(text, button) {
    let ok = false;
    try {
      await navigator.clipboard.writeText(text);
      ok = true;
    } catch (e) {
      const ta = el('textarea');
      ta.value = text;
      document.body.append(ta);
      ta.select();
      try { ok = document.execCommand('copy'); } catch (x) { ok = false; }
      ta.remove();
    }
    const old = button.textContent;
    button.textContent = ok ? 'Copied' : 'Copy failed';
    setTimeout(() => { button.textContent = old; }, 1200);
  }

  // ------------------------------------------------------------------------------------------ layout helpers

  function nearBottom() {
    const s = ui.messages;
    return s.scrollHeight - s.scrollTop - s.clientHeight < 120;
  }
  function scrollToBottom(force) {
    if (force || nearBottom()) ui.messages.scrollTop = ui.messages.scrollHeight;
  }
  function autoGrow() {
    ui.prompt.style.height = 'auto';
    ui.prompt.style.height = Math.min(ui.prompt.scrollHeight, window.innerHeight * 0.4) + 'px';
  }

  function setSettingsOpen(open, quiet) {
    ui.settings.dataset.open = String(open);
    ui.settingsToggle.setAttribute('aria-expanded', String(open));
    ui.backdrop.hidden = !open || window.innerWidth > 860;
    const u = load(KEY_UI, {});
    u.settingsOpen = open;
    save(KEY_UI, u);
    if (open && !quiet) fetchProps();
  }

  const THEMES = ['auto', 'light', 'dark'];
  function applyTheme(t) {
    document.documentElement.dataset.theme = t;
    ui.themeLabel.textContent = t[0].toUpperCase() + t.slice(1);
    $('theme-toggle').title = 'Colour theme: ' + (t === 'auto' ? 'follows the system' : t) + ' (click to change)';
    $('hljs-light').media = t === 'auto' ? '(prefers-color-scheme: light)' : t === 'light' ? 'all' : 'not all';
    $('hljs-dark').media = t === 'auto' ? '(prefers-color-scheme: dark)' : t === 'dark' ? 'all' : 'not all';
    // redraw charts in the new colours
    for (const m of state.messages) if (m.series && m.series.length > 1) { const v = views.get(m.id); if (v) drawChart(v.canvas, m.series); }
  }

  // ------------------------------------------------------------------------------------------ wiring

  ui.composer.addEventListener('submit', (e) => { e.preventDefault(); send(); });
  ui.prompt.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing && e.keyCode !== 229) {
      e.preventDefault();
      send();
    }
  });
  ui.prompt.addEventListener('input', autoGrow);
  ui.stop.addEventListener('click', stop);
  document.addEventListener('keydown', (e) => {
    if (e.key === 'Escape' && state.busy) { e.preventDefault(); stop(); }
    else if (e.key === 'Escape' && ui.settings.dataset.open === 'true' && window.innerWidth <= 860) setSettingsOpen(false);
  });
  ui.thinking.addEventListener('change', () => { updateControls(); saveSettings(); });
  ui.effort.addEventListener('change', saveSettings);
  $('new-chat').addEventListener('click', newChat);
  ui.settingsToggle.addEventListener('click', () => setSettingsOpen(ui.settings.dataset.open !== 'true'));
  $('settings-close').addEventListener('click', () => setSettingsOpen(false));
  ui.backdrop.addEventListener('click', () => setSettingsOpen(false));
  $('refresh-props').addEventListener('click', fetchProps);
  $('reset-settings').addEventListener('click', () => {
    for (const f of FIELDS) $(f.id).value = '';
    $('stop-strings').value = '';
    $('ignore-eos').checked = false;
    $('spec-q').value = '';
    $('prediction').value = '';
    saveSettings();
  });
  for (const id of ['system-prompt', 'stop-strings', 'ignore-eos', 'spec-q', 'prediction', 'api-key', ...FIELDS.map((f) => f.id)]) {
    $(id).addEventListener('change', saveSettings);
  }
  $('api-key').addEventListener('change', fetchProps);
  $('theme-toggle').addEventListener('click', () => {
    const cur = document.documentElement.dataset.theme || 'auto';
    const t = THEMES[(THEMES.indexOf(cur) + 1) % THEMES.length];
    applyTheme(t);
    const u = load(KEY_UI, {});
    u.theme = t;
    save(KEY_UI, u);
  });
  window.addEventListener('resize', () => { ui.backdrop.hidden = ui.settings.dataset.open !== 'true' || window.innerWidth > 860; });

  // ------------------------------------------------------------------------------------------ start

  restoreSettings();
  const uiState = load(KEY_UI, {});
  applyTheme(THEMES.includes(uiState.theme) ? uiState.theme : 'auto');
  const saved = load(KEY_CHAT, []);
  if (Array.isArray(saved)) {
    state.messages = saved.filter((m) => m && (m.role === 'user' || m.role === 'assistant') && typeof m.content === 'string');
    for (const m of state.messages) if (m.state === 'streaming') m.state = 'stopped';
  }
  renderAll();
  setSettingsOpen(!!uiState.settingsOpen && window.innerWidth > 860, true);
  fetchProps();
  ui.prompt.focus();

  // for tests and the curious
  window.ds4jPlayground = { state, renderMarkdown, send, stop, buildRequest, stopStrings };
})();
