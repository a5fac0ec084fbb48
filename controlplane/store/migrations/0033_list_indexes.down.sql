DROP INDEX api_keys_org_live;
