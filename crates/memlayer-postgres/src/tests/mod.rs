//! Tests against a real PostgreSQL (`crate::test_cluster`): each test has a database of its
//! own, on a throwaway cluster or on `MEMLAYER_TEST_DATABASE_URL`.

mod migrations;
