import { defineConfig } from "vite";

// Two builds from one codebase (frontend/README.md):
//   `vite build`              -> dist/       live console, embedded in weir (served at /)
//   `vite build --mode demo`  -> dist-demo/  the WebAssembly demo, static files under BASE_PATH
export default defineConfig(({ mode }) => ({
  base: mode === "demo" ? (process.env.BASE_PATH ?? "./") : "/",
  build: {
    outDir: mode === "demo" ? "dist-demo" : "dist",
    emptyOutDir: true,
    target: "es2022",
    assetsInlineLimit: 0,
    reportCompressedSize: false,
  },
  test: { include: ["src/**/*.test.ts"] },
}));
