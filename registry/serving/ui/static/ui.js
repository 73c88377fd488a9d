// prompt-registry UI: small progressive enhancements; every page works without them.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  // A filter box hides the rows of its table that do not contain its text.
  for (const box of document.querySelectorAll("input[data-filter]")) {
    const table = document.getElementById(box.dataset.filter);
    if (!table) continue;
    box.addEventListener("input", () => {
      const wanted = box.value.trim().toLowerCase();
      for (const row of table.querySelectorAll("tbody tr")) {
        row.hidden = wanted !== "" && !(row.dataset.filterText || "").toLowerCase().includes(wanted);
      }
    });
  }
  // Copy buttons copy the text of the element they name.
  for (const button of document.querySelectorAll("button[data-copy]")) {
    button.addEventListener("click", async () => {
      const source = document.getElementById(button.dataset.copy);
      if (!source || !navigator.clipboard) return;
      await navigator.clipboard.writeText(source.textContent || "");
      const label = button.textContent;
      button.textContent = "Copied";
      setTimeout(() => { button.textContent = label; }, 1500);
    });
  }
  // Choosing an example loads it.
  for (const select of document.querySelectorAll("select[data-autosubmit]")) {
    select.addEventListener("change", () => select.form && select.form.submit());
  }
});
