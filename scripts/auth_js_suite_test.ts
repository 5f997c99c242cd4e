import assert from "node:assert/strict";
import {
  adaptClients,
  flowOf,
  liveFiles,
  suiteAuthConfig,
  type SuiteTest,
} from "./auth_js_suite.ts";
import { LOCAL_ANON_KEY, LOCAL_SERVICE_ROLE_KEY } from "../local/auth/mod.ts";

// The shape of supabase-js's test/lib/clients.ts the runner relies on.
const CLIENTS =
  `export const GOTRUE_URL_SIGNUP_ENABLED_AUTO_CONFIRM_ON = 'http://127.0.0.1:54321/auth/v1'
export const GOTRUE_JWT_SECRET = 'super-secret-jwt-token-with-at-least-32-characters-long'
export const SUPABASE_PUBLISHABLE_KEY = jwt.sign(
  { role: 'anon' },
  privateKey,
  { algorithm: 'RS256', keyid: rsaKey.kid }
)
export const SUPABASE_SECRET_KEY = jwt.sign(
  { role: 'service_role' },
  privateKey,
  { algorithm: 'RS256', keyid: rsaKey.kid }
)
const AUTH_ADMIN_JWT = jwt.sign(
  {
    sub: '1234567890',
    role: 'supabase_admin',
  },
  privateKey,
  { algorithm: 'RS256', keyid: rsaKey.kid }
)
`;

Deno.test("adaptClients: URL, the CLI's keys, the admin JWT signed HS256", () => {
  const out = adaptClients(CLIENTS, "http://127.0.0.1:4000/auth/v1");
  assert.ok(out.includes("'http://127.0.0.1:4000/auth/v1'"));
  assert.ok(!out.includes("54321"));
  assert.ok(out.includes(`SUPABASE_PUBLISHABLE_KEY = '${LOCAL_ANON_KEY}'`));
  assert.ok(out.includes(`SUPABASE_SECRET_KEY = '${LOCAL_SERVICE_ROLE_KEY}'`));
  assert.ok(
    /role: 'supabase_admin',\n {2}\},\n {2}GOTRUE_JWT_SECRET,/.test(out),
  );
  assert.ok(out.includes("{ algorithm: 'HS256' }"));
  assert.ok(!out.includes("RS256"));
});

Deno.test("adaptClients: the stack's new API keys in place of the CLI's JWTs (--keys new)", () => {
  const out = adaptClients(CLIENTS, "http://127.0.0.1:4000/auth/v1", {
    publishable: "sb_publishable_abc",
    secret: "sb_secret_def",
  });
  assert.ok(out.includes("SUPABASE_PUBLISHABLE_KEY = 'sb_publishable_abc'"));
  assert.ok(out.includes("SUPABASE_SECRET_KEY = 'sb_secret_def'"));
  assert.ok(!out.includes(LOCAL_ANON_KEY));
});

Deno.test("adaptClients: a changed file is refused, not half adapted", () => {
  assert.throws(
    () => adaptClients(CLIENTS.replace("54321", "9999"), "http://x/auth/v1"),
    /expected one CLI Auth URL, found 0/,
  );
});

Deno.test("suiteAuthConfig: the settings the stand-in has, passing over those it cannot honour", () => {
  assert.deepEqual(
    suiteAuthConfig(`[auth]
site_url = "http://127.0.0.1:3000"
additional_redirect_urls = ["https://127.0.0.1:3000"]
enable_anonymous_sign_ins = true
[auth.email]
enable_confirmations = false
`),
    {
      siteUrl: "http://127.0.0.1:3000",
      additionalRedirectUrls: ["https://127.0.0.1:3000"],
      emailConfirmations: false,
      // What the file leaves unset: supabase start's defaults.
      emailTemplates: {},
      jwtExpiry: 3600,
      otpExpiry: 3600,
      signupEnabled: true,
      minPasswordLength: 6,
      phoneAutoconfirm: true,
    },
  );
});

Deno.test("liveFiles: the test files that import the live-server clients", () => {
  assert.deepEqual(
    liveFiles({
      "b.test.ts": "import { authClient } from './lib/clients'",
      "a.test.ts": "import x from './lib/clients'",
      "mock.test.ts": "import { MockServer } from 'jest-mock-server'",
      "clients.ts": "from './lib/clients'",
    }),
    ["a.test.ts", "b.test.ts"],
  );
});

Deno.test("flowOf: titles first, then the stack's answers, else served", () => {
  const test = (title: string, errors: SuiteTest["errors"] = []) => ({
    file: "GoTrueClient.test.ts",
    ancestors: ["GoTrueClient"],
    title,
    status: "failed",
    errors,
  });
  const cases: [ReturnType<typeof test>, string][] = [
    [test("signInWithSSO with minimal params"), "SSO/SAML"],
    // A late answer to the previous test does not override the titles.
    [
      test("reauthenticate() fails without session", [
        { route: "POST /token?grant_type=id_token", status: 400, code: "x" },
      ]),
      "reauthentication",
    ],
    [
      test("should work with lazy initialization", [
        {
          route: "POST /signup",
          status: 401,
          code: "No API key found in request",
        },
      ]),
      "no apikey sent",
    ],
    // The PKCE flow is served: its failure would be one in a served flow.
    [test("signUp() with email and PKCE flowType"), "served flows"],
    // So are invites and generate_link.
    [
      test(
        "inviteUserByEmail() creates a new user with an invited_at timestamp",
        [
          { route: "POST /invite", status: 422, code: "email_exists" },
        ],
      ),
      "served flows",
    ],
    [
      test(
        "generateLink supports signUp with generate confirmation signup link",
        [
          {
            route: "POST /admin/generate_link",
            status: 404,
            code: "not_found",
          },
        ],
      ),
      "served flows",
    ],
    [
      test("signUp() with email", [
        { route: "POST /signup", status: 422, code: "weak_password" },
      ]),
      "served flows",
    ],
  ];
  for (const [t, flow] of cases) assert.deepEqual(flowOf(t), flow, t.title);
});
