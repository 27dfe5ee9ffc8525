-- Sample source database for the demo (`make demo`): idempotent, safe to re-run.
CREATE TABLE IF NOT EXISTS customers (
    id          bigserial PRIMARY KEY,
    email       text NOT NULL UNIQUE,
    full_name   text NOT NULL,
    tier        text NOT NULL DEFAULT 'standard',
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS orders (
    id           bigserial PRIMARY KEY,
    customer_id  bigint NOT NULL REFERENCES customers (id),
    total        numeric(12, 2) NOT NULL,
    status       text NOT NULL DEFAULT 'new',
    items        jsonb NOT NULL DEFAULT '[]',
    ordered_on   date NOT NULL DEFAULT current_date
);
INSERT INTO customers (email, full_name, tier)
SELECT 'customer' || g || '@example.com', 'Customer ' || g, CASE WHEN g % 10 = 0 THEN 'gold' ELSE 'standard' END
FROM generate_series(1, 200) AS g
ON CONFLICT (email) DO NOTHING;
INSERT INTO orders (customer_id, total, status, items)
SELECT 1 + (g % 200), round((g * 7.31)::numeric % 500, 2), 'new', jsonb_build_array(jsonb_build_object('sku', 'SKU-' || g, 'qty', 1 + g % 3))
FROM generate_series(1, 500) AS g
WHERE NOT EXISTS (SELECT FROM orders);
