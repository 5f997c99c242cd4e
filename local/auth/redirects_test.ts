import assert from "node:assert/strict";
import { isRedirectAllowed } from "./redirects.ts";

// Supabase Auth's own cases (internal/utilities/request_test.go,
// TestIsRedirectURLValidSameOrigin), with no allow list.
Deno.test("isRedirectAllowed: back to site_url needs its scheme, host and port; any port on localhost", () => {
  for (
    const [site, target, want] of [
      ["https://example.com", "https://example.com/path", true],
      ["https://example.com", "http://example.com/path", false],
      ["http://example.com", "https://example.com/path", false],
      ["https://example.com", "https://example.com:8443/path", false],
      ["https://example.com:9000", "https://example.com:9000/path", true],
      ["https://example.com:9000", "https://example.com/path", false],
      ["https://example.com:9000", "https://example.com:9001/path", false],
      ["http://localhost:3000", "http://localhost:8080/callback", true],
      ["http://127.0.0.1:3000", "http://127.0.0.1:8080/callback", true],
      ["http://localhost:3000", "http://localhost/callback", true],
      ["https://localhost:3000", "http://localhost:8080/callback", false],
    ] as const
  ) {
    assert.equal(
      isRedirectAllowed(site, [], target),
      want,
      `${site} ${target}`,
    );
  }
});

// Supabase Auth's TestGetReferrer cases, its allow list and site_url.
Deno.test("isRedirectAllowed: the allow list's globs (* stops at . and /), loopback IPs, and refused IP hosts as in Supabase Auth", () => {
  const site = "https://example.com";
  const allow = [
    "http://localhost:8000/*",
    "http://*.localhost:8000/*",
    "http://*:12345/*",
    "http://**:12345/*",
  ];
  for (
    const [target, want] of [
      ["http://localhost:8000/path", true],
      ["http://localhost:3000", false],
      ["http://localhost:8000", false],
      ["http://localhost:8000/path/to/page", false],
      ["http://localhost:8000/path?param=1", true],
      ["http://123?.localhost:8000/path", false],
      ["http://123.123.123.123?localhost:8000/path", false],
      [
        "http://[65e7:9410:d8b6:e227:58cd:e55b:8fc0:206d]?localhost:8000/path",
        false,
      ],
      [
        "http://65e7:9410:d8b6:e227:58cd:e55b:8fc0:206d?localhost:8000/path",
        false,
      ],
      ["http://127.0.0.1:12345/path", true],
      ["http://[0:0:0:0:0:0:0:1]:12345/path", true],
      ["https://example.com/dashboard", true],
      ["http://example.com/dashboard", false],
      ["https://example.com:8443/dashboard", false],
    ] as const
  ) {
    assert.equal(isRedirectAllowed(site, allow, target), want, target);
  }
});

Deno.test("isRedirectAllowed: * does not cross a dot, ** does; the fragment is not matched; {a,b} and ? as gobwas/glob reads them", () => {
  const site = "https://example.com";
  const ok = (pattern: string, target: string) =>
    isRedirectAllowed(site, [pattern], target);
  assert.equal(ok("https://*.app.dev/**", "https://pr-1.app.dev/a/b"), true);
  assert.equal(ok("https://*.app.dev/**", "https://evil.com.app.dev/a"), false);
  assert.equal(ok("https://**.app.dev/**", "https://a.b.app.dev/x"), true);
  assert.equal(ok("https://app.dev/*", "https://app.dev/cb#x/y/z"), true);
  assert.equal(ok("https://{a,b}.app.dev/", "https://b.app.dev/"), true);
  assert.equal(ok("https://{a,b}.app.dev/", "https://c.app.dev/"), false);
  assert.equal(ok("https://app.dev/v?", "https://app.dev/v2"), true);
  assert.equal(ok("https://app.dev/v?", "https://app.dev/v/"), false);
  assert.equal(ok("myapp://callback", "myapp://callback"), true);
  assert.equal(isRedirectAllowed(site, [], ""), false);
  assert.equal(isRedirectAllowed(site, [], "not a url"), false);
});

Deno.test("isRedirectAllowed: on a localhost site any port of the same host is allowed, a subdomain of localhost included (isLocalhost's .localhost suffix)", () => {
  assert.equal(
    isRedirectAllowed(
      "http://app.localhost:3000",
      [],
      "http://app.localhost:3001/auth/callback",
    ),
    true,
  );
  assert.equal(
    isRedirectAllowed("http://localhost:3000", [], "http://localhost:3001/cb"),
    true,
  );
  assert.equal(
    isRedirectAllowed(
      "http://app.example:3000",
      [],
      "http://app.example:3001/cb",
    ),
    false,
  );
});
