// The playground page: keeps the conversation, posts it to the local server, shows the answer as it streams.
"use strict";
(() => {
  const token = new URLSearchParams(location.search).get("token") || "";
  const $ = (id) => document.getElementById(id);
  const messages = $("messages"), prompt = $("prompt"), send = $("send"), stop = $("stop");
  const temperature = $("temperature");
  let conversation = [];
  let current = null; // {id, controller}

  const api = (path, init = {}) => fetch(path, {
    ...init,
    headers: { "Content-Type": "application/json", "X-Playground-Token": token, ...(init.headers || {}) },
  });

  function bubble(role, text) {
    const node = document.createElement("div");
    node.className = `msg ${role}`;
    const body = document.createElement("div");
    body.className = "text";
    body.textContent = text;
    node.append(body);
    messages.querySelector(".empty")?.remove();
    messages.append(node);
    messages.scrollTop = messages.scrollHeight;
    return node;
  }

  function meta(node, text) {
    let line = node.querySelector(".meta");
    if (!line) { line = document.createElement("div"); line.className = "meta"; node.append(line); }
    line.textContent = text;
  }

  function timingLine(e) {
    const parts = [];
    if (e.ttft_ms !== null && e.ttft_ms !== undefined) parts.push(`TTFT ${e.ttft_ms} ms`);
    parts.push(`${e.tokens} tokens`, `${e.tokens_per_s} tokens/s`, `${e.latency_s.toFixed(2)} s total`);
    if (e.finish_reason === "length") parts.push("cut at max tokens");
    return parts.join(" · ");
  }

  function busy(on) {
    send.hidden = on; stop.hidden = !on; prompt.disabled = on;
    if (!on) prompt.focus();
  }

  function empty() {
    const note = document.createElement("p");
    note.className = "empty";
    note.textContent = "Ask the model something. Answers stream here with their time to first token and speed.";
    messages.replaceChildren(note);
  }

  async function ask(text) {
    conversation.push({ role: "user", content: text });
    bubble("user", text);
    const node = bubble("assistant", "");
    const body = node.querySelector(".text");
    meta(node, "waiting for the first token…");
    const id = crypto.randomUUID();
    const controller = new AbortController();
    current = { id, controller };
    busy(true);
    const started = performance.now();
    let answer = "", reasoning = null, outcome = "stopped";
    try {
      const response = await api("/api/chat", {
        method: "POST",
        signal: controller.signal,
        body: JSON.stringify({
          id,
          messages: conversation,
          system: $("system").value,
          temperature: Number(temperature.value),
          max_tokens: Number($("max-tokens").value),
        }),
      });
      if (!response.ok) {
        const problem = await response.json().catch(() => ({}));
        throw new Error(problem.error || `HTTP ${response.status}`);
      }
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value;
        let cut;
        while ((cut = buffer.indexOf("\n\n")) >= 0) {
          const raw = buffer.slice(0, cut);
          buffer = buffer.slice(cut + 2);
          if (!raw.startsWith("data: ")) continue;
          const e = JSON.parse(raw.slice(6));
          if (e.type === "delta") {
            if (e.reasoning) {
              if (!reasoning) {
                reasoning = document.createElement("details");
                reasoning.append(Object.assign(document.createElement("summary"), { textContent: "reasoning" }));
                node.prepend(reasoning);
              }
              reasoning.append(e.reasoning);
            }
            if (e.content) { answer += e.content; body.textContent = answer; }
            if (answer || reasoning) meta(node, "streaming…");
            messages.scrollTop = messages.scrollHeight;
          } else if (e.type === "done") {
            outcome = "done";
            meta(node, timingLine(e));
          } else if (e.type === "error") {
            outcome = "error";
            node.classList.add("error");
            meta(node, e.message);
          } else if (e.type === "stopped") {
            outcome = "stopped";
          }
        }
      }
    } catch (error) {
      if (error.name !== "AbortError") {
        outcome = "error";
        node.classList.add("error");
        meta(node, String(error.message || error));
      }
    } finally {
      if (outcome === "stopped") {
        meta(node, `stopped after ${((performance.now() - started) / 1000).toFixed(2)} s`);
      }
      if (answer && outcome !== "error") {
        conversation.push({ role: "assistant", content: answer });
      } else {
        conversation.pop(); // an unanswered question is not part of the conversation
      }
      current = null;
      busy(false);
    }
  }

  $("composer").addEventListener("submit", (event) => {
    event.preventDefault();
    const text = prompt.value.trim();
    if (!text || current) return;
    prompt.value = "";
    ask(text);
  });
  prompt.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      $("composer").requestSubmit();
    }
  });
  stop.addEventListener("click", () => {
    if (!current) return;
    const { id, controller } = current;
    stop.disabled = true;
    // The server shuts the SageMaker stream first; then this page stops reading.
    api("/api/stop", { method: "POST", body: JSON.stringify({ id }) })
      .catch(() => {})
      .finally(() => { controller.abort(); stop.disabled = false; });
  });
  $("clear").addEventListener("click", () => {
    if (current) stop.click();
    conversation = [];
    empty();
  });
  temperature.addEventListener("input", () => { $("temperature-value").textContent = temperature.value; });

  empty();
  api("/api/info").then((r) => r.json()).then((info) => {
    const target = info.endpoint + (info.inference_component ? ` / ${info.inference_component}` : "");
    $("target").textContent = target;
    document.title = `Playground · ${target}`;
  }).catch(() => { $("target").textContent = "(cannot reach the local server)"; });
})();
