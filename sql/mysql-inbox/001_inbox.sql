-- txbox inbox on MySQL 8 / MariaDB 10.6+. {{inbox}}, {{keys}}, {{audit}}: the quoted table names.
-- One row per (consumer, event id): the handler's writes and the row's 'processed' mark commit in one
-- transaction, so a redelivered id is skipped. JSON is LONGTEXT checked by json_valid, as in the outbox.
CREATE TABLE IF NOT EXISTS {{inbox}} (
  consumer VARCHAR(200) NOT NULL,
  -- The canonical spelling (lower case, hyphenated): every spelling of one UUID is one row.
  event_id CHAR(36) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  type VARCHAR(1000) NOT NULL,
  `key` VARCHAR(1000) NOT NULL,
  version BIGINT NULL,
  -- processed: applied once. failed: the handler threw; the broker redelivers (or txbox redrives).
  -- dead: gave up after max attempts. held: waits for an earlier version (projection gap).
  -- retry: an operator asked to run it again.
  status ENUM('processed', 'failed', 'dead', 'held', 'retry') NOT NULL,
  attempts INT NOT NULL DEFAULT 0,
  last_error TEXT NULL,
  received_at DATETIME(6) NOT NULL,
  processed_at DATETIME(6) NULL,
  -- When it was (last) held or re-checked.
  held_at DATETIME(6) NULL,
  -- The envelope, kept only while the event may have to run again (failed, dead, held, retry).
  envelope LONGTEXT NULL CHECK (envelope IS NULL OR json_valid(envelope)),
  -- The transaction that last claimed or failed the row (MySQL has no RETURNING: the store reads its own rows back by it).
  claim CHAR(36) CHARACTER SET ascii COLLATE ascii_bin NULL,
  PRIMARY KEY (consumer, event_id),
  INDEX by_key (consumer, `key`(190), status, version),
  INDEX by_status (consumer, status, held_at),
  INDEX finished (status, processed_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- One row per hash of (consumer, key) of versioned events, locked by the transactions of that key in
-- hash order: a hold cannot commit between an earlier version's look for held events and its commit.
CREATE TABLE IF NOT EXISTS {{keys}} (
  slot INT UNSIGNED NOT NULL PRIMARY KEY
) ENGINE = InnoDB;

-- Who retried or discarded dead or held events.
CREATE TABLE IF NOT EXISTS {{audit}} (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
  at DATETIME(6) NOT NULL,
  action VARCHAR(40) NOT NULL,
  consumer VARCHAR(200) NOT NULL,
  event_id CHAR(36) CHARACTER SET ascii NULL,
  actor VARCHAR(200) NOT NULL,
  detail TEXT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
