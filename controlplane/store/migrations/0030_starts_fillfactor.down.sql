ALTER TABLE usage_request_starts RESET (fillfactor);
