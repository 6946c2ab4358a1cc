import js from "@eslint/js";
import tseslint from "typescript-eslint";
import globals from "globals";

export default tseslint.config(
  { ignores: ["dist/**", "dist-demo/**", "src/wasm/**", "node_modules/**", "wasm/**"] },
  js.configs.recommended,
  ...tseslint.configs.strict,
  { files: ["src/**/*.ts"], languageOptions: { globals: globals.browser } },
  // e2e: node, plus the page functions it hands to the browser.
  { files: ["e2e/**/*.mjs", "*.js"], languageOptions: { globals: { ...globals.node, ...globals.browser } } },
);
