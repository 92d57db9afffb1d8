-- The demo table of docker-compose.yml (run once, when the database is created).
CREATE TABLE public.demo_orders (
  id bigserial PRIMARY KEY,
  customer text NOT NULL,
  amount numeric(10, 2) NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now()
);
