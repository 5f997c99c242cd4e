/**
 * The seeded identities of the local fixture. `supabase/seed.sql` holds the
 * matching `usuarios` rows; together they cover every matching strategy and
 * both kinds of administrator.
 *
 * @module
 */

/** One seeded Supabase Auth identity. */
export interface SeedIdentity {
  readonly id: string;
  readonly email: string;
  readonly password: string;
  /** What this identity demonstrates. */
  readonly role: string;
  /**
   * The operator vouches for the address (`app_metadata`
   * `admin_verified_email`), as an `ADMIN_EMAILS` administrator needs
   * while sign-ups are confirmed at once (docs/security.md).
   */
  readonly adminVerified?: boolean;
}

/** `ADMIN_EMAILS` the local stack gives the functions unless overridden. */
export const LOCAL_ADMIN_EMAILS = "jefa@example.com";

/**
 * `USERNAME_MATCH_DOMAINS` the local stack gives the functions unless
 * overridden: the fixture's own domain, so that `diego@example.com` reaches
 * the row `diego` while `soporte@elsewhere.test` reaches no row.
 */
export const LOCAL_USERNAME_MATCH_DOMAINS = "example.com";

/** Local development identities; their passwords are printed at start. */
export const SEED_IDENTITIES: readonly SeedIdentity[] = [
  {
    id: "00000000-0000-4000-8000-000000000001",
    email: "ana@example.com",
    password: "ana-password",
    role: "user, row linked by auth_user_id",
  },
  {
    id: "00000000-0000-4000-8000-000000000002",
    email: "bruno@example.com",
    password: "bruno-password",
    role: "user, row matched by correo",
  },
  {
    id: "00000000-0000-4000-8000-000000000003",
    email: "carla@example.com",
    password: "carla-password",
    role: "user, row matched by nombre_usuario = email",
  },
  {
    id: "00000000-0000-4000-8000-000000000004",
    email: "diego@example.com",
    password: "diego-password",
    role: "user, row matched only by username 'diego'",
  },
  {
    id: "00000000-0000-4000-8000-000000000005",
    email: "admin@example.com",
    password: "admin-password",
    role: "administrator by rol, row linked",
  },
  {
    id: "00000000-0000-4000-8000-000000000006",
    email: "jefa@example.com",
    password: "jefa-password",
    role: "administrator by ADMIN_EMAILS (address stamped), no row",
    adminVerified: true,
  },
  {
    id: "00000000-0000-4000-8000-000000000007",
    email: "nadie@example.com",
    password: "nadie-password",
    role: "identity with no usuarios row (404)",
  },
  {
    id: "00000000-0000-4000-8000-000000000008",
    email: "soporte@elsewhere.test",
    password: "soporte-password",
    role: "outsider sharing admin username 'soporte': no row, no rights",
  },
  {
    id: "00000000-0000-4000-8000-000000000009",
    email: "soporte@example.com",
    password: "soporte-example-password",
    role: "administrator by rol, row linked",
  },
];
