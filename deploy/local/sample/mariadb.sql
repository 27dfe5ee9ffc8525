-- Sample source database for the demo (`make demo`): idempotent, safe to re-run.
CREATE TABLE IF NOT EXISTS products (
    id          INT AUTO_INCREMENT PRIMARY KEY,
    sku         VARCHAR(32) NOT NULL UNIQUE,
    name        VARCHAR(200) NOT NULL,
    price       DECIMAL(10, 2) NOT NULL,
    in_stock    BOOLEAN NOT NULL DEFAULT TRUE,
    updated_at  DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6)
);
INSERT IGNORE INTO products (sku, name, price)
WITH RECURSIVE seq (n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM seq WHERE n < 300)
SELECT CONCAT('SKU-', n), CONCAT('Product ', n), ROUND(MOD(n * 3.17, 250), 2) FROM seq;
