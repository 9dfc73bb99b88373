// Draws the book's ```mermaid blocks as diagrams (GitHub draws them itself). mdBook renders
// them as code; this turns each into a <pre class="mermaid"> and loads mermaid, pinned,
// from its CDN — only on pages that have a diagram. Without the network the text stays.
(async () => {
  const blocks = document.querySelectorAll("code.language-mermaid");
  if (blocks.length === 0) return;
  const { default: mermaid } = await import(
    "https://cdn.jsdelivr.net/npm/mermaid@11.4.1/dist/mermaid.esm.min.mjs"
  );
  for (const code of blocks) {
    const diagram = document.createElement("pre");
    diagram.className = "mermaid";
    diagram.textContent = code.textContent;
    code.parentElement.replaceWith(diagram);
  }
  const dark = ["coal", "navy", "ayu"].some((t) => document.documentElement.classList.contains(t));
  mermaid.initialize({ startOnLoad: false, theme: dark ? "dark" : "default" });
  await mermaid.run();
})();
